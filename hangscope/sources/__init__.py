"""One loader per evidence format; each turns a file into parts of the evidence model."""

from hangscope.cli import main

raise SystemExit(main())

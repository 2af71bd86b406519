/* hangscope report: renders the embedded payload (hangscope.report/1).
   Data only ever reaches the page through textContent and setAttribute on fixed attributes:
   never through HTML parsing. No network, no external code. */
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("report-data").textContent);
  var S = function (i) { return i === null || i === undefined || i < 0 ? "" : D.strings[i]; };
  var $ = function (id) { return document.getElementById(id); };

  function el(tag, attrs) {
    var node = document.createElement(tag);
    if (attrs) {
      for (var key in attrs) {
        if (attrs[key] === null || attrs[key] === undefined) continue;
        if (key === "text") node.textContent = String(attrs[key]);
        else if (key === "cls") node.className = attrs[key];
        else node.setAttribute(key, String(attrs[key]));
      }
    }
    for (var i = 2; i < arguments.length; i++) {
      var child = arguments[i];
      if (child === null || child === undefined || child === false) continue;
      node.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
    }
    return node;
  }
  function plural(n, word) { return n + " " + word + (n === 1 ? "" : /s$/.test(word) ? "es" : "s"); }
  function ranksLabel(text) { return (/[-,]/.test(text) ? "ranks " : "rank ") + text; }
  function clock(ms) {
    if (ms === null || ms === undefined) return "";
    return new Date(ms).toISOString().replace("T", " ").replace("Z", "");
  }
  function fmtFrame(i) {
    var line = D.frames.line[i];
    return { name: S(D.frames.name[i]), where: S(D.frames.file[i]) + (line === null ? "" : ":" + line),
             lib: D.frames.lib[i] === 1 };
  }

  // ---- headline -------------------------------------------------------------------------
  var sum = D.summary, root = D.findings.length ? D.findings[0] : null;
  var status = $("status");
  status.textContent = sum.status.toUpperCase();
  status.className = "status status-" + sum.status;
  var head = sum.headline.charAt(0).toUpperCase() + sum.headline.slice(1), cut = head.indexOf("; ");
  $("verdict").textContent = cut > 40 ? head.slice(0, cut) : head;
  $("verdict-more").textContent = cut > 40 ? "\u2026 " + head.slice(cut + 2) : "";
  function fact(label, value, cls) {
    $("facts").appendChild(el("div", { cls: cls || null }, el("dt", { text: label }), el("dd", { text: value })));
  }
  if (root) {
    fact("culprit", root.culprits ? ranksLabel(root.culprits) : "unknown", "culprit");
    fact("finding", root.kind.replace(/_/g, " "));
    if (root.collective) {
      var c = root.collective;
      fact("collective", c.op + (c.seq === null ? "" : " seq " + c.seq) +
        (c.pg === null ? "" : " on pg " + c.pg + (c.pg_desc ? " (" + c.pg_desc + ")" : "")));
    }
    fact("confidence", Math.round(root.confidence * 100) + "%");
    if (root.waiting) fact("waiting", ranksLabel(root.waiting));
  }
  fact("ranks with evidence", (sum.ranks_seen || "none") + (sum.world_size ? " of " + sum.world_size : ""));
  if (sum.ranks_missing) fact("no evidence from", ranksLabel(sum.ranks_missing), "culprit");
  if (D.gaps.length) {  // the first few (those that matter most come first); the rest folded
    var GAPS_SHOWN = 3, more = el("ul");
    $("gaps").hidden = false;
    D.gaps.forEach(function (g, i) {
      (i < GAPS_SHOWN ? $("gap-list") : more).appendChild(el("li", { text: g }));
    });
    if (D.gaps.length > GAPS_SHOWN) {
      $("gaps").appendChild(el("details", { cls: "gap-more" },
        el("summary", { text: (D.gaps.length - GAPS_SHOWN) + " more" }), more));
    }
  }

  // ---- what differs between ranks ---------------------------------------------------------
  if (D.config && D.config.length) {
    $("config-sec").hidden = false;
    var cbody = document.querySelector("#config-table tbody");
    D.config.forEach(function (row) {
      var cell = el("td");
      row.values.forEach(function (v, i) {
        var item = el("div", { cls: i === 0 ? "" : "odd-value" }, el("code", { text: v.value || "(empty)" }),
          document.createTextNode(" \u2014 " + ranksLabel(v.ranks) + " "));
        if (v.where) item.appendChild(el("span", { cls: "sub", text: v.where }));
        cell.appendChild(item);
      });
      cbody.appendChild(el("tr", null, el("td", { text: row.setting }), cell,
        el("td", { text: row.unknown ? ranksLabel(row.unknown) : "" })));
    });
  }

  // ---- findings ---------------------------------------------------------------------------
  function evidenceTable(ev) {
    var body = el("tbody");
    for (var i = 0; i < ev.source.length; i++) {
      var rank = ev.rank[i];
      body.appendChild(el("tr", null, el("td", { text: S(ev.source[i]) }),
        el("td", { cls: "num" }, rank === null ? "" : rankLink(rank)),
        el("td", { text: ev.detail[i] }), el("td", null, el("code", { text: S(ev.where[i]) }))));
    }
    return el("table", { cls: "data" }, el("thead", null, el("tr", null, el("th", { text: "source" }),
      el("th", { text: "rank", cls: "num" }), el("th", { text: "detail" }), el("th", { text: "where" }))), body);
  }
  function findingBody(f) {
    var box = el("div");
    var line = f.kind.replace(/_/g, " ") + " \u2014 culprit " + (f.culprits ? ranksLabel(f.culprits) : "unknown") +
      " \u2014 confidence " + Math.round(f.confidence * 100) + "%";
    box.appendChild(el("p", null, el("b", { text: line })));
    box.appendChild(el("p", { text: f.summary }));
    box.appendChild(evidenceTable(f.evidence));
    return box;
  }
  if (root) {
    $("root-finding").appendChild(el("div", { cls: "finding" }, findingBody(root)));
  } else {
    $("root-finding").appendChild(el("p", { cls: "sub", text: "No finding: " + sum.headline }));
  }
  D.findings.slice(1).forEach(function (f) {
    var d = el("details", { cls: "finding secondary" },
      el("summary", { text: "Also: " + f.kind.replace(/_/g, " ") + " \u2014 " + f.summary }));
    d.appendChild(findingBody(f));
    $("other-findings").appendChild(d);
  });

  // ---- rank classes ------------------------------------------------------------------------
  var C = D.classes, nClasses = C.id.length;
  var classOfRank = new Map(), rowByClass = [];
  for (var r = 0; r < D.ranks.rank.length; r++) classOfRank.set(D.ranks.rank[r], D.ranks.cls[r]);
  var classById = new Map(C.id.map(function (id, i) { return [id, i]; }));
  function rankLink(rank) {
    var a = el("a", { href: "#ranks-sec", text: String(rank), "data-rank": rank });
    a.addEventListener("click", function (e) { e.preventDefault(); showRank(rank); });
    return a;
  }
  var tbody = document.querySelector("#class-table tbody");
  var keys = { ranks: function (i) { return C.rep[i]; }, count: function (i) { return C.count[i]; },
    role: function (i) { return S(C.role[i]); }, state: function (i) { return S(C.state[i]); },
    where: function (i) { return S(C.where[i]); }, last: function (i) { return S(C.last[i]); } };
  // a GPU column only where some rank's GPU is known
  var hasGpu = (C.gpu || []).some(function (g) { return g >= 0; });
  if (hasGpu) {
    keys.gpu = function (i) { return S(C.gpu[i]); };
    document.querySelector("#class-table thead tr").appendChild(el("th", { "data-key": "gpu", text: "GPU" }));
  }
  for (var i = 0; i < nClasses; i++) {
    var role = S(C.role[i]);
    var tr = el("tr", { cls: "role-" + role, "data-cls": C.id[i] },
      el("td", { cls: "mono", text: C.ranks[i] }), el("td", { cls: "num", text: C.count[i] }),
      el("td", null, el("span", { cls: "role " + role, text: role })), el("td", { text: S(C.state[i]) }),
      el("td", null, el("code", { text: S(C.where[i]) })), el("td", { text: S(C.last[i]) }));
    if (hasGpu) tr.appendChild(el("td", { cls: "mono", text: S(C.gpu[i]) }));
    tr.addEventListener("click", showRank.bind(null, C.rep[i]));
    rowByClass.push(tr);
    tbody.appendChild(tr);
  }
  function sortBy(key, th) {
    var desc = th.classList.contains("sorted-asc");
    document.querySelectorAll("#class-table th").forEach(function (h) { h.classList.remove("sorted-asc", "sorted-desc"); });
    th.classList.add(desc ? "sorted-desc" : "sorted-asc");
    var order = rowByClass.map(function (_, i) { return i; });
    order.sort(function (a, b) {
      var x = keys[key](a), y = keys[key](b);
      var cmp = typeof x === "number" ? x - y : String(x).localeCompare(String(y));
      return (desc ? -cmp : cmp) || C.rep[a] - C.rep[b];
    });
    order.forEach(function (i) { tbody.appendChild(rowByClass[i]); });
  }
  document.querySelectorAll("#class-table th[data-key]").forEach(function (th) {
    th.addEventListener("click", function () { sortBy(th.getAttribute("data-key"), th); });
  });
  function applyFilter() {
    var q = $("filter").value.trim().toLowerCase(), shown = 0, ranks = 0;
    var only = /^\d+$/.test(q) ? classOfRank.get(parseInt(q, 10)) : undefined;
    for (var i = 0; i < nClasses; i++) {
      var hit = !q || (only !== undefined ? only === i : rowByClass[i].textContent.toLowerCase().indexOf(q) >= 0);
      rowByClass[i].hidden = !hit;
      if (hit) { shown++; ranks += C.count[i]; }
    }
    $("filter-count").textContent = plural(shown, "class") + ", " + plural(ranks, "rank") + " shown";
  }
  $("filter").addEventListener("input", applyFilter);
  applyFilter();
  document.querySelectorAll("#waitgraph g.node").forEach(function (g) {
    var ci = classById.get(g.getAttribute("data-cls"));
    if (ci === undefined) return;
    g.addEventListener("click", function () { showRank(C.rep[ci]); });
    g.addEventListener("keydown", function (e) { if (e.key === "Enter") showRank(C.rep[ci]); });
  });

  // ---- per-rank detail ----------------------------------------------------------------------
  function table(head, rows, rowCls) {
    var body = el("tbody");
    rows.forEach(function (cells, i) {
      var tr = el("tr", { cls: rowCls ? rowCls(i) : null });
      cells.forEach(function (c) { tr.appendChild(c instanceof Node ? el("td", null, c) : el("td", { text: c === null ? "" : c })); });
      body.appendChild(tr);
    });
    var hr = el("tr");
    head.forEach(function (h) { hr.appendChild(el("th", { text: h })); });
    return el("table", { cls: "data" }, el("thead", null, hr), body);
  }
  function frameBlock(stack, cut) {
    var pre = el("div", { cls: "frames" });
    stack.forEach(function (fi) {
      var f = fmtFrame(fi);
      pre.appendChild(el("div", { cls: f.lib ? "lib" : null }, f.name + "  ", el("span", { cls: "where", text: f.where })));
    });
    if (cut) pre.appendChild(el("div", { cls: "lib", text: "\u2026 " + plural(cut, "outer frame") + " not kept" }));
    if (!stack.length) pre.appendChild(el("div", { cls: "lib", text: "(no frames)" }));
    return pre;
  }
  function stacksSection(box, st, title) {
    if (!st) return;
    box.appendChild(el("h3", { text: title + " (" + S(st.source) + (st.path >= 0 ? ", " + S(st.path) : "") + ")" }));
    var t = st.threads;
    for (var i = 0; i < t.name.length; i++) {
      var flags = [t.main[i] ? "main" : "", t.active[i] === false ? "idle" : t.active[i] ? "active" : "", t.gil[i] ? "holds GIL" : ""]
        .filter(Boolean).join(", ");
      var d = el("details", { open: i === 0 ? "" : null },
        el("summary", { text: "thread " + (S(t.name[i]) || "?") + " (" + t.tid[i] + ")" + (flags ? " \u2014 " + flags : "") }),
        frameBlock(t.stack[i], t.cut[i]));
      box.appendChild(d);
    }
  }
  function frSection(box, fr) {
    if (!fr) { box.appendChild(el("p", { cls: "sub", text: "No flight-recorder dump for this rank." })); return; }
    box.appendChild(el("h3", { text: "Call stack of the op it is blocked in (else its newest op)" }));
    box.appendChild(frameBlock(fr.stack, 0));
    fr.groups.forEach(function (g) {
      var e = g.entries, rows = [];
      for (var i = 0; i < e.rid.length; i++) {
        var dur = e.started[i] !== null && e.completed[i] !== null ? (e.completed[i] - e.started[i]).toFixed(3) + " ms" : "";
        rows.push([String(e.rid[i]), (e.p2p[i] ? "p2p " : "") + e.seq[i], S(e.op[i]) + (e.peer[i] !== null ? " peer " + e.peer[i] : ""),
          S(e.state[i]) + (e.done[i] === false ? " (not completed)" : ""), S(e.sizes[i]),
          el("span", { cls: "nowrap", text: clock(e.created[i]) }), dur, el("code", { text: S(e.where[i]) })]);
      }
      box.appendChild(el("h3", { text: "Flight recorder, pg " + S(g.pg) + ": last " + e.rid.length + " of " + g.total + " entries (" + S(fr.path) + ")" }));
      box.appendChild(table(["record", "seq", "op", "state", "sizes", "enqueued (UTC)", "duration", "call site"], rows,
        function (i) { return i === g.pending ? "pending" : null; }));
    });
  }
  function logTable(lg) {
    var rows = [];
    for (var i = 0; i < lg.msg.length; i++) {
      rows.push([el("span", { cls: "sev-" + S(lg.sev[i]), text: S(lg.sev[i]) }), S(lg.kind[i]),
        el("code", { text: S(lg.where[i]) }), el("div", { cls: "msg", text: lg.msg[i] })]);
    }
    var t = table(["severity", "kind", "file:line", "line"], rows);
    return lg.omitted ? el("div", null, t, el("p", { cls: "sub", text: lg.omitted + " less severe lines left out" })) : t;
  }
  function procTable(p) {
    var rows = [];
    for (var i = 0; i < p.status.length; i++) {
      rows.push([S(p.status[i]), el("span", { cls: "nowrap", text: clock(p.at[i] * 1000) }), p.cpu[i] === null ? "" : p.cpu[i].toFixed(2) + " s",
        p.rss[i] === null ? "" : (p.rss[i] / 1048576).toFixed(0) + " MiB", p.threads[i], S(p.wchan[i]),
        p.exit[i] === null ? (p.signal[i] === null ? "" : "signal " + p.signal[i]) : "exit " + p.exit[i]]);
    }
    return table(["status", "sampled (UTC)", "cpu time", "rss", "threads", "wchan", "exit"], rows);
  }
  function showRank(rank) {
    var ci = classOfRank.get(rank);
    var box = $("detail");
    box.textContent = "";
    box.hidden = false;
    rowByClass.forEach(function (tr) { tr.classList.remove("selected"); });
    if (ci === undefined) { box.appendChild(el("p", { text: "Rank " + rank + " is not in this job's evidence." })); return; }
    rowByClass[ci].classList.add("selected");
    var det = D.details[String(rank)], stand = null;
    if (!det) { stand = C.rep[ci]; det = D.details[String(stand)]; }
    var role = S(C.role[ci]);
    box.appendChild(el("h3", null, "Rank " + rank + " ", el("span", { cls: "role " + role, text: role })));
    box.appendChild(el("p", null, "Class of " + plural(C.count[ci], "rank") + ": ", el("code", { text: C.ranks[ci] }),
      " \u2014 " + S(C.state[ci])));
    var ri = D.ranks.rank.indexOf(rank);
    var meta = [S(D.ranks.host[ri]) && "host " + S(D.ranks.host[ri]), D.ranks.pid[ri] !== null && "pid " + D.ranks.pid[ri],
      S(D.ranks.status[ri]) && "process " + S(D.ranks.status[ri]),
      D.ranks.gpu && S(D.ranks.gpu[ri])].filter(Boolean);
    if (meta.length) box.appendChild(el("p", { cls: "sub", text: meta.join(" \u00b7 ") }));
    var picker = el("div", { cls: "picker" }, "Detailed ranks in this class: ");
    Object.keys(D.details).map(Number).filter(function (x) { return classOfRank.get(x) === ci; }).sort(function (a, b) { return a - b; })
      .forEach(function (x) {
        var b = el("button", { type: "button", cls: x === rank ? "on" : null, text: String(x) });
        b.addEventListener("click", function () { showRank(x); });
        picker.appendChild(b);
      });
    var go = el("input", { type: "number", min: 0, placeholder: "any rank", "aria-label": "show rank" });
    go.addEventListener("change", function () { if (go.value !== "") showRank(parseInt(go.value, 10)); });
    picker.appendChild(go);
    box.appendChild(picker);
    if (!det) { box.appendChild(el("p", { cls: "sub", text: "No detail kept for this class." })); box.scrollIntoView(); return; }
    if (stand !== null) {
      box.appendChild(el("p", { cls: "warn", text: "No separate detail kept for rank " + rank + "; showing rank " + stand +
        ", which has the same flight-recorder state (same class)." }));
    }
    stacksSection(box, det.stacks, "Threads");
    if (!det.stacks) box.appendChild(el("p", { cls: "sub", text: "No py-spy stacks for this rank." }));
    frSection(box, det.fr);
    if (det.logs.msg.length) { box.appendChild(el("h3", { text: "Log lines" })); box.appendChild(logTable(det.logs)); }
    if (det.proc.status.length) { box.appendChild(el("h3", { text: "Process state" })); box.appendChild(procTable(det.proc)); }
    det.workers.forEach(function (w) {
      box.appendChild(el("h3", { text: "DataLoader worker pid " + w.pid }));
      if (w.proc.status.length) box.appendChild(procTable(w.proc));
      stacksSection(box, w.stacks, "Worker threads");
    });
    box.scrollIntoView({ block: "start" });
  }

  // ---- merged stack tree ------------------------------------------------------------------
  (function () {
    var T = D.tree, n = T.parent.length, kids = [];
    for (var i = 0; i < n; i++) kids.push([]);
    var roots = [];
    for (i = 0; i < n; i++) (T.parent[i] < 0 ? roots : kids[T.parent[i]]).push(i);
    $("tree-source").textContent = !n ? "" : T.source === "py-spy" ? "from py-spy samples, outermost frame first" :
      "no py-spy samples: call stacks of each rank's current flight-recorder op, outermost first";
    var out = $("tree"), total = sum.n_seen || 1;
    if (!n) { out.appendChild(el("span", { cls: "sub", text: "No stacks in this evidence." })); return; }
    var stack = roots.slice().reverse().map(function (x) { return [x, 0]; });
    while (stack.length) {
      var top = stack.pop(), node = top[0], depth = top[1], f = fmtFrame(T.frame[node]);
      var branch = T.parent[node] >= 0 && kids[T.parent[node]].length > 1 || T.parent[node] < 0 && roots.length > 1;
      var cnt = el("span", { cls: "cnt", title: "ranks " + S(T.ranks[node]), text: "[" + S(T.ranks[node]) + "]" });
      cnt.addEventListener("click", (function (first) { return function () { showRank(first); }; })(parseInt(S(T.ranks[node]), 10)));
      out.appendChild(el("div", { cls: "n" + (branch ? " branch" : "") + (T.count[node] * 4 < total ? " minor" : "") + (f.lib ? " lib" : "") },
        cnt, " ".repeat(depth * 2) + (branch ? "\u251c " : "\u2502 "), el("span", { cls: "fn", text: f.name }), "  ",
        el("span", { cls: "lib", text: f.where })));
      var ch = kids[node].slice().sort(function (a, b) { return T.count[b] - T.count[a] || a - b; });
      var next = ch.length > 1 ? depth + 1 : depth;
      for (var k = ch.length - 1; k >= 0; k--) stack.push([ch[k], next]);
    }
    if (T.truncated) out.appendChild(el("div", { cls: "sub", text: T.truncated + " more nodes not kept" }));
  })();

  // ---- job-level logs, footer, deep link ---------------------------------------------------------
  if (D.job_logs.msg.length) { $("joblogs-sec").hidden = false; $("job-logs").appendChild(logTable(D.job_logs)); }
  $("inputs").textContent = sum.inputs.length ? "evidence: " + sum.inputs.join(", ") : "";
  $("notes").textContent = D.notes.length ? " \u00b7 " + D.notes.join(" \u00b7 ") : "";
  var m = /^#rank=(\d+)$/.exec(location.hash);
  if (m) showRank(parseInt(m[1], 10));
})();

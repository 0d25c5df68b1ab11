// fleetbench report: draws the charts described in #fleetbench-data (orchestrator/htmlreport.py) as SVG.
// Values show on hover; a chart's legend switches its series on and off; the host boxes at the top
// choose which hosts the fleet medians are taken over. No library and no network: the page is one file.
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("fleetbench-data").textContent);
  var NS = "http://www.w3.org/2000/svg";
  var COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
                "#7f7f7f", "#bcbd22"];
  var MARKS = ["circle", "square", "triangle", "diamond", "down", "plus", "cross", "star"];
  var VERDICT_COLORS = {SLOWER: "#d62728", FASTER: "#2ca02c", SAME: "#7f7f7f", AMBIGUOUS: "#ff7f0e",
                        UNSTABLE: "#9467bd"};
  var W = 620, H = 340, M = {l: 64, r: 18, t: 12, b: 46};
  var hostsOn = new Set(DATA.hosts);
  var tip = document.getElementById("tip");

  // A backend (or host) keeps its colour and marker in every chart: colour i mod 10, marker i mod 8.
  function styleOf(names) {
    var out = {};
    names.forEach(function (name, i) { out[name] = {color: COLORS[i % COLORS.length], mark: MARKS[i % MARKS.length]}; });
    return out;
  }
  var BACKEND_STYLE = styleOf(DATA.backends);
  var HOST_STYLE = styleOf(DATA.hosts);

  function el(tag, attrs, parent, text) {
    var node = document.createElementNS(NS, tag);
    for (var k in attrs) { if (attrs[k] !== undefined && attrs[k] !== null) node.setAttribute(k, attrs[k]); }
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }
  function fmt(v) {
    if (v === null || v === undefined || !isFinite(v)) return "–";
    if (Number.isInteger(v) && Math.abs(v) < 1e6) return String(v);
    var a = Math.abs(v);
    return a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : a >= 0.1 ? v.toFixed(2) : v.toPrecision(3);
  }
  function median(xs) {
    var s = xs.slice().sort(function (a, b) { return a - b; });
    var n = s.length;
    return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
  }
  function hostValues(p) {  // a point's values on the hosts switched on
    var out = [];
    for (var h in p.hosts) { if (hostsOn.has(h)) out.push(p.hosts[h]); }
    return out;
  }

  function marker(g, kind, x, y, color, size) {
    var node = drawMarker(g, kind, x, y, color, size);
    node.setAttribute("data-mark", kind);
    return node;
  }
  function drawMarker(g, kind, x, y, color, size) {
    var r = size || 4.5, d;
    switch (kind) {
      case "circle": return el("circle", {cx: x, cy: y, r: r, fill: color, "class": "mark"}, g);
      case "square": d = "M" + (x - r) + "," + (y - r) + "h" + 2 * r + "v" + 2 * r + "h" + -2 * r + "z"; break;
      case "triangle": d = "M" + x + "," + (y - r * 1.2) + "L" + (x + r * 1.1) + "," + (y + r * 0.8) + "L" + (x - r * 1.1) + "," + (y + r * 0.8) + "z"; break;
      case "down": d = "M" + x + "," + (y + r * 1.2) + "L" + (x + r * 1.1) + "," + (y - r * 0.8) + "L" + (x - r * 1.1) + "," + (y - r * 0.8) + "z"; break;
      case "diamond": d = "M" + x + "," + (y - r * 1.3) + "L" + (x + r) + "," + y + "L" + x + "," + (y + r * 1.3) + "L" + (x - r) + "," + y + "z"; break;
      case "plus": return el("path", {d: "M" + (x - r) + "," + y + "h" + 2 * r + "M" + x + "," + (y - r) + "v" + 2 * r,
                                      stroke: color, "stroke-width": 2.2, fill: "none", "class": "mark"}, g);
      case "cross": return el("path", {d: "M" + (x - r) + "," + (y - r) + "l" + 2 * r + "," + 2 * r + "M" + (x - r) + "," + (y + r) + "l" + 2 * r + "," + -2 * r,
                                       stroke: color, "stroke-width": 2.2, fill: "none", "class": "mark"}, g);
      default:  // star
        d = "";
        for (var i = 0; i < 10; i++) {
          var a = Math.PI / 5 * i - Math.PI / 2, rr = i % 2 ? r * 0.5 : r * 1.3;
          d += (i ? "L" : "M") + (x + rr * Math.cos(a)).toFixed(2) + "," + (y + rr * Math.sin(a)).toFixed(2);
        }
        d += "z";
    }
    return el("path", {d: d, fill: color, "class": "mark"}, g);
  }

  function hover(node, text) {
    node.addEventListener("mouseover", function (ev) {
      tip.textContent = text;
      tip.style.display = "block";
      tip.style.left = (ev.clientX + 14) + "px";
      tip.style.top = (ev.clientY + 10) + "px";
    });
    node.addEventListener("mouseout", function () { tip.style.display = "none"; });
  }

  // -- scales and axes ------------------------------------------------------------------------------------
  function linear(d0, d1, r0, r1) {
    if (d1 === d0) { d0 -= 1; d1 += 1; }
    var f = function (v) { return r0 + (v - d0) / (d1 - d0) * (r1 - r0); };
    f.ticks = function () {
      var span = d1 - d0, step = Math.pow(10, Math.floor(Math.log10(span / 5)));
      if (span / step > 10) step *= 2;
      if (span / step > 10) step *= 2.5;
      var out = [];
      for (var v = Math.ceil(d0 / step) * step; v <= d1 + step * 1e-9; v += step) out.push(+v.toPrecision(12));
      return out;
    };
    return f;
  }
  function logScale(base, d0, d1, r0, r1) {
    var l0 = Math.log(d0) / Math.log(base), l1 = Math.log(d1) / Math.log(base);
    if (l1 === l0) { l0 -= 0.5; l1 += 0.5; }
    var f = function (v) { return r0 + (Math.log(v) / Math.log(base) - l0) / (l1 - l0) * (r1 - r0); };
    f.ticks = function () {
      var out = [];
      for (var e = Math.ceil(l0 - 1e-9); e <= l1 + 1e-9; e++) out.push(Math.pow(base, e));
      return out;
    };
    return f;
  }
  function axes(svg, x, y, xLabel, yLabel, xTicks, yTicks) {
    var grid = el("g", {"class": "grid"}, svg), ax = el("g", {"class": "axis"}, svg);
    (yTicks || y.ticks()).forEach(function (v) {
      var py = y(v);
      el("line", {x1: M.l, x2: W - M.r, y1: py, y2: py}, grid);
      el("text", {x: M.l - 6, y: py + 4, "text-anchor": "end"}, ax, fmt(v));
    });
    (xTicks || x.ticks()).forEach(function (v) {
      var px = x(v);
      el("line", {x1: px, x2: px, y1: M.t, y2: H - M.b}, grid);
      el("text", {x: px, y: H - M.b + 16, "text-anchor": "middle"}, ax, fmt(v));
    });
    el("path", {d: "M" + M.l + "," + M.t + "V" + (H - M.b) + "H" + (W - M.r), fill: "none"}, ax);
    el("text", {x: (M.l + W - M.r) / 2, y: H - 8, "text-anchor": "middle"}, ax, xLabel);
    el("text", {x: 14, y: (M.t + H - M.b) / 2, "text-anchor": "middle",
                transform: "rotate(-90 14 " + (M.t + H - M.b) / 2 + ")"}, ax, yLabel);
  }

  // -- the legend: one button per series, click to switch it off and on ------------------------------
  function legend(fig, chart, names, styles, redraw) {
    var box = document.createElement("div");
    box.className = "legend";
    names.forEach(function (name) {
      var b = document.createElement("button");
      b.type = "button";
      b.dataset.series = name;
      if (chart.hidden.has(name)) b.className = "off";
      var icon = el("svg", {width: 14, height: 14, "class": "fb"}, b);
      var st = styles[name] || {color: "#444", mark: "circle"};
      marker(icon, st.mark, 7, 7, st.color, 4);
      b.appendChild(document.createTextNode(name));
      b.addEventListener("click", function () {
        if (chart.hidden.has(name)) chart.hidden.delete(name); else chart.hidden.add(name);
        redraw();
      });
      box.appendChild(b);
    });
    fig.appendChild(box);
  }

  // -- chart kinds ------------------------------------------------------------------------------------------
  function seriesPoints(chart, s) {
    // [{x, y, lo, hi, n, tip}] of one series over the hosts on.
    var out = [];
    s.points.forEach(function (p) {
      var vals = hostValues(p);
      if (chart.kind === "speedup") {
        var base = (chart.base.filter(function (q) { return q.x === p.x; })[0] || {hosts: {}});
        var ratios = [], bases = hostValues(base);
        for (var h in p.hosts) { if (hostsOn.has(h) && base.hosts[h] !== undefined) ratios.push(base.hosts[h] / p.hosts[h]); }
        if (!vals.length || !bases.length) return;
        var sp = median(bases) / median(vals);
        out.push({x: p.x, y: sp, lo: ratios.length ? Math.min.apply(null, ratios) : sp,
                  hi: ratios.length ? Math.max.apply(null, ratios) : sp, n: vals.length,
                  tip: s.name + "\nM=" + p.x + ": " + fmt(sp) + "x over " + chart.baseline + " (" + fmt(median(vals)) +
                       " vs " + fmt(median(bases)) + " µs)\nper host " + fmt(Math.min.apply(null, ratios)) + " .. " +
                       fmt(Math.max.apply(null, ratios)) + "x, " + vals.length + " host(s)"});
        return;
      }
      if (!vals.length) return;
      var med = median(vals), lo = Math.min.apply(null, vals), hi = Math.max.apply(null, vals);
      out.push({x: p.x, y: med, lo: lo, hi: hi, n: vals.length,
                tip: s.name + "\nM=" + p.x + ": " + fmt(med) + " " + chart.unit +
                     (vals.length > 1 ? "\nmin " + fmt(lo) + " .. max " + fmt(hi) + " over " + vals.length + " hosts" : "\n1 host")});
    });
    return out;
  }

  function drawXY(fig, chart) {  // "fleet" and "speedup": y against M (log 2), one line per backend
    var all = [];
    var computed = chart.series.map(function (s) {
      var pts = seriesPoints(chart, s);
      if (!chart.hidden.has(s.name)) all = all.concat(pts);
      return {name: s.name, pts: pts};
    });
    var svg = el("svg", {width: W, height: H, "class": "fb", "data-kind": chart.kind}, fig);
    if (!all.length) {
      el("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}, svg, "nothing to show for the hosts and series switched on");
    } else {
      var xs = all.map(function (p) { return p.x; });
      var lo = Math.min.apply(null, all.map(function (p) { return p.lo; }));
      var hi = Math.max.apply(null, all.map(function (p) { return p.hi; }));
      if (chart.kind === "speedup") { lo = Math.min(lo, 1); hi = Math.max(hi, 1); }
      var y0 = chart.kind === "speedup" ? lo - (hi - lo) * 0.08 : Math.min(0, lo);
      var x = logScale(2, Math.min.apply(null, xs) / 1.25, Math.max.apply(null, xs) * 1.25, M.l, W - M.r);
      var y = linear(y0, hi + (hi - y0) * 0.08, H - M.b, M.t);
      axes(svg, x, y, chart.x_label, chart.y_label);
      if (chart.kind === "speedup") el("line", {x1: M.l, x2: W - M.r, y1: y(1), y2: y(1), stroke: "#000", "stroke-width": 1}, svg);
      computed.forEach(function (c) {
        var st = BACKEND_STYLE[c.name] || {color: "#444", mark: "circle"};
        var g = el("g", {"class": "series" + (chart.hidden.has(c.name) ? " off" : ""), "data-series": c.name}, svg);
        if (!c.pts.length) return;
        if (c.pts.some(function (p) { return p.hi > p.lo; })) {
          var band = c.pts.map(function (p) { return x(p.x) + "," + y(p.hi); })
            .concat(c.pts.slice().reverse().map(function (p) { return x(p.x) + "," + y(p.lo); }));
          el("polygon", {points: band.join(" "), fill: st.color, "fill-opacity": 0.12, stroke: "none"}, g);
        }
        el("path", {d: c.pts.map(function (p, i) { return (i ? "L" : "M") + x(p.x) + "," + y(p.y); }).join(""),
                    fill: "none", stroke: st.color, "stroke-width": 1.6}, g);
        c.pts.forEach(function (p) { hover(marker(g, st.mark, x(p.x), y(p.y), st.color), p.tip); });
      });
    }
    legend(fig, chart, chart.series.map(function (s) { return s.name; }), BACKEND_STYLE, function () { redraw(fig, chart); });
  }

  function drawRoofline(fig, chart) {
    var pts = [];
    chart.series.forEach(function (s) { if (!chart.hidden.has(s.name)) pts = pts.concat(s.points); });
    var svg = el("svg", {width: W, height: H, "class": "fb", "data-kind": chart.kind}, fig);
    var xsAll = pts.map(function (p) { return p.x; }).concat([1]);
    var x0 = Math.min.apply(null, xsAll) / 2, x1 = Math.max.apply(null, xsAll) * 4;
    var peaks = chart.roofs.map(function (r) { return r.peak; });
    var ys = pts.map(function (p) { return p.y; }).concat(peaks);
    var y = logScale(10, Math.min.apply(null, ys.concat(chart.roofs.map(function (r) { return x0 * r.tb_s; }))) / 1.5,
                     Math.max.apply(null, ys) * 1.6, H - M.b, M.t);
    var x = logScale(10, x0, x1, M.l, W - M.r);
    axes(svg, x, y, chart.x_label, chart.y_label);
    chart.roofs.forEach(function (r, i) {
      var d = "";
      for (var j = 0; j <= 60; j++) {
        var ai = x0 * Math.pow(x1 / x0, j / 60);
        d += (j ? "L" : "M") + x(ai).toFixed(1) + "," + y(Math.min(r.peak, ai * r.tb_s)).toFixed(1);
      }
      el("path", {d: d, fill: "none", stroke: ["#555", "#999", "#bbb"][i % 3], "stroke-dasharray": "5,4", "stroke-width": 1.3}, svg);
      el("text", {x: W - M.r - 4, y: y(r.peak) - 4, "text-anchor": "end", fill: "#555"}, svg, r.name);
    });
    chart.series.forEach(function (s) {
      var st = BACKEND_STYLE[s.name] || {color: "#444", mark: "circle"};
      var g = el("g", {"class": "series" + (chart.hidden.has(s.name) ? " off" : ""), "data-series": s.name}, svg);
      s.points.forEach(function (p) {
        hover(marker(g, st.mark, x(p.x), y(p.y), st.color), s.name + " " + p.what + "\n" + fmt(p.y) + " TFLOPS at " +
              fmt(p.x) + " FLOP/byte (median over all hosts)");
      });
    });
    legend(fig, chart, chart.series.map(function (s) { return s.name; }), BACKEND_STYLE, function () { redraw(fig, chart); });
  }

  function heatColor(ratio) {  // 1: white; slower: red; faster: blue; full colour at ±20%
    var t = Math.max(-1, Math.min(1, Math.log(ratio) / Math.log(1.2)));
    var c = Math.round(255 * (1 - Math.abs(t)));
    return t >= 0 ? "rgb(255," + c + "," + c + ")" : "rgb(" + c + "," + c + ",255)";
  }

  function drawHeatmap(fig, chart) {
    var hosts = chart.hosts.filter(function (h) { return hostsOn.has(h); });
    var cols = chart.cases.map(function (c) {
      var on = hosts.filter(function (h) { return c.cells[h]; });
      return {c: c, med: on.length >= 2 ? median(on.map(function (h) { return c.cells[h].us; })) : null};
    }).filter(function (col) { return col.med !== null; });
    var cw = Math.max(12, Math.min(36, 900 / Math.max(1, cols.length))), ch = 22, left = 120, top = 8;
    var bottom = 150, w = left + cw * cols.length + 20, h = top + ch * hosts.length + bottom;
    var svg = el("svg", {width: Math.max(w, 320), height: h, "class": "fb", "data-kind": "heatmap"}, fig);
    if (!cols.length) {
      el("text", {x: 10, y: 30}, svg, "needs two or more hosts switched on that ran the same case");
      return;
    }
    hosts.forEach(function (host, i) {
      el("text", {x: left - 6, y: top + ch * i + ch / 2 + 4, "text-anchor": "end"}, svg, host);
      cols.forEach(function (col, j) {
        var cell = col.c.cells[host];
        var attrs = {x: left + cw * j, y: top + ch * i, width: cw - 1, height: ch - 1, "class": "cell",
                     "data-host": host, "data-case": col.c.case};
        if (!cell) { attrs.fill = "#f2f2f2"; el("rect", attrs, svg); return; }
        var ratio = cell.us / col.med;
        attrs.fill = heatColor(ratio);
        attrs["data-ratio"] = ratio.toFixed(4);
        hover(el("rect", attrs, svg), host + "\n" + col.c.case + (col.c.label ? " (" + col.c.label + ")" : "") + "\n" +
              fmt(cell.us) + " µs, fleet median " + fmt(col.med) + " µs: " + ratio.toFixed(3) + "x" +
              (cell.profile ? "\nprofiled: " + cell.profile : ""));
      });
    });
    cols.forEach(function (col, j) {
      var cx = left + cw * j + cw / 2, cy = top + ch * hosts.length + 6;
      el("text", {x: cx, y: cy, "text-anchor": "end", transform: "rotate(-60 " + cx + " " + cy + ")",
                  "font-size": 11}, svg, col.c.case.length > 30 ? col.c.case.slice(0, 29) + "…" : col.c.case);
    });
    var scale = document.createElement("div");
    scale.className = "legend";
    [0.83, 0.91, 1.0, 1.1, 1.2].forEach(function (r) {
      var b = document.createElement("span");
      b.style.cssText = "padding:1px 8px;border:1px solid #ccc;background:" + heatColor(r) +
        (Math.abs(Math.log(r)) > 0.12 ? ";color:#fff" : "");
      b.textContent = r.toFixed(2) + "x";
      scale.appendChild(b);
    });
    var note = document.createElement("span");
    note.textContent = "host median / fleet median over the hosts on (grey: not run there)";
    scale.appendChild(note);
    fig.appendChild(scale);
  }

  // Ratios on a log axis: B twice as slow (2) and twice as fast (0.5) lie as far from 1. Interval ends
  // beyond RATIO_LIMIT (or unbounded) are drawn to the axis's edge with an arrow.
  var RATIO_LIMIT = 64;
  var RATIO_TICKS = [1 / 64, 1 / 32, 1 / 16, 1 / 8, 0.25, 0.5, 0.67, 0.8, 0.9, 0.95, 0.98, 1, 1.02, 1.05, 1.1,
                     1.25, 1.5, 2, 4, 8, 16, 32, 64];
  function ratioText(v) { return v < 0.25 ? "1/" + Math.round(1 / v) : String(+v.toPrecision(3)); }
  function ratioValue(v) {  // a ratio in the tooltip: three decimals, as in the table
    return v === null || v === undefined || !isFinite(v) ? "–" : Math.abs(v) >= 1000 ? v.toExponential(2) : v.toFixed(3);
  }
  function ratioTicks(x, lo, hi, minGap) {
    // 1 first, then outwards, each tick at least minGap pixels from those kept.
    var inside = RATIO_TICKS.filter(function (v) { return v >= lo && v <= hi; });
    inside.sort(function (a, b) { return Math.abs(Math.log(a)) - Math.abs(Math.log(b)); });
    var kept = [];
    inside.forEach(function (v) {
      if (kept.every(function (k) { return Math.abs(x(k) - x(v)) >= minGap; })) kept.push(v);
    });
    return kept.sort(function (a, b) { return a - b; });
  }

  function drawForest(fig, chart) {
    var rows = chart.rows.filter(function (r) { return !chart.hidden.has(r.verdict); });
    var rh = 20, left = 300, h = M.t + rh * Math.max(rows.length, 1) + M.b, w = W + 120;
    var svg = el("svg", {width: w, height: h, "class": "fb", "data-kind": "forest"}, fig);
    var band = [Math.max(1 - chart.threshold, 1 / (1 + chart.threshold)), 1 + chart.threshold];
    function clamp(v) { return Math.min(RATIO_LIMIT, Math.max(1 / RATIO_LIMIT, v)); }
    function usable(v) { return v !== null && v !== undefined && isFinite(v) && v > 0; }
    var ends = band.concat([1]);
    rows.forEach(function (r) { [r.ratio, r.lo, r.hi].forEach(function (v) { if (usable(v)) ends.push(clamp(v)); }); });
    var lo = Math.min.apply(null, ends), hi = Math.max.apply(null, ends), pad = Math.pow(hi / lo, 0.06);
    var x = logScale(10, lo / pad, hi * pad, left, w - M.r);
    var bottom = M.t + rh * Math.max(rows.length, 1);
    el("rect", {x: x(band[0]), y: M.t, width: x(band[1]) - x(band[0]), height: bottom - M.t, fill: "#888",
                "fill-opacity": 0.15}, svg);
    el("line", {x1: x(1), x2: x(1), y1: M.t, y2: bottom, stroke: "#000"}, svg);
    var ax = el("g", {"class": "axis"}, svg);
    ratioTicks(x, lo / pad, hi * pad, 36).forEach(function (v) {
      el("text", {x: x(v), y: bottom + 16, "text-anchor": "middle", "data-ratio": v}, ax, ratioText(v));
      el("line", {x1: x(v), x2: x(v), y1: bottom, y2: bottom + 4}, ax);
    });
    el("text", {x: (left + w) / 2, y: bottom + 36, "text-anchor": "middle"}, ax, chart.x_label);
    rows.forEach(function (r, i) {
      var cy = M.t + rh * i + rh / 2, color = VERDICT_COLORS[r.verdict] || "#000";
      var g = el("g", {"class": "series", "data-series": r.verdict}, svg);
      el("text", {x: left - 8, y: cy + 4, "text-anchor": "end"}, g, r.name.length > 44 ? r.name.slice(0, 43) + "…" : r.name);
      var hasCI = r.lo !== null && r.lo !== undefined && r.hi !== null && r.hi !== undefined;
      if (hasCI) {
        var x0 = x(usable(r.lo) ? clamp(r.lo) : 1 / RATIO_LIMIT), x1 = x(usable(r.hi) ? clamp(r.hi) : RATIO_LIMIT);
        el("line", {x1: x0, x2: x1, y1: cy, y2: cy, stroke: color, "stroke-width": 2}, g);
        if (!usable(r.lo) || r.lo < 1 / RATIO_LIMIT) el("path", {d: "M" + (x0 + 6) + "," + (cy - 4) + "L" + x0 + "," + cy + "L" + (x0 + 6) + "," + (cy + 4), fill: "none", stroke: color}, g);
        if (!usable(r.hi) || r.hi > RATIO_LIMIT) el("path", {d: "M" + (x1 - 6) + "," + (cy - 4) + "L" + x1 + "," + cy + "L" + (x1 - 6) + "," + (cy + 4), fill: "none", stroke: color}, g);
      }
      hover(marker(g, "circle", x(clamp(r.ratio)), cy, color, 4.5), r.name + "\n" + r.verdict + ": B/A " + ratioValue(r.ratio) +
            (hasCI ? " (95% CI " + ratioValue(r.lo) + " .. " + ratioValue(r.hi) + ")" : " (no interval)") +
            "\nA " + fmt(r.a_us) + " µs, B " + fmt(r.b_us) + " µs");
    });
    var verdicts = [];
    chart.rows.forEach(function (r) { if (verdicts.indexOf(r.verdict) < 0) verdicts.push(r.verdict); });
    var styles = {};
    verdicts.forEach(function (v) { styles[v] = {color: VERDICT_COLORS[v] || "#000", mark: "circle"}; });
    legend(fig, chart, verdicts, styles, function () { redraw(fig, chart); });
  }

  // Head-to-head: the pair the reader picks (a select of every two backends timed together), per shape
  // B/A from their paired samples as a dot and a 95% bar on a log axis, a line at 1, the tie band shaded;
  // per host rows follow the host boxes at the top, the fleet's row (several hosts) is always drawn.
  function drawHeadToHead(fig, chart) {
    var pair = chart.pairs[chart.selected] || chart.pairs[0];
    var pick = document.createElement("select");
    pick.className = "pair";
    chart.pairs.forEach(function (p, i) {
      var opt = document.createElement("option");
      opt.value = String(i);
      opt.textContent = "B = " + p.b + " against A = " + p.a;
      if (p === pair) opt.selected = true;
      pick.appendChild(opt);
    });
    pick.addEventListener("change", function () {
      chart.selected = +pick.value;
      chart.hidden = new Set();
      redraw(fig, chart);
    });
    fig.appendChild(pick);
    var colors = {A: (BACKEND_STYLE[pair.a] || {color: "#1f77b4"}).color, B: (BACKEND_STYLE[pair.b] || {color: "#d62728"}).color,
                  tie: "#7f7f7f", unsure: "#ff7f0e", unpaired: "#bbbbbb", "not-ok": "#bbbbbb"};
    var rows = pair.rows.filter(function (r) { return !chart.hidden.has(r.verdict) && (!r.host || hostsOn.has(r.host)); });
    var rh = 20, left = 300, h = M.t + rh * Math.max(rows.length, 1) + M.b, w = W + 120;
    var svg = el("svg", {width: w, height: h, "class": "fb", "data-kind": "headtohead", "data-pair": pair.b + "/" + pair.a}, fig);
    var band = [1 / (1 + chart.tie), 1 + chart.tie];
    function clamp(v) { return Math.min(RATIO_LIMIT, Math.max(1 / RATIO_LIMIT, v)); }
    function usable(v) { return v !== null && v !== undefined && isFinite(v) && v > 0; }
    var ends = band.concat([1]);
    rows.forEach(function (r) { [r.ratio, r.lo, r.hi].forEach(function (v) { if (usable(v)) ends.push(clamp(v)); }); });
    var lo = Math.min.apply(null, ends), hi = Math.max.apply(null, ends), pad = Math.pow(hi / lo, 0.06);
    var x = logScale(10, lo / pad, hi * pad, left, w - M.r);
    var bottom = M.t + rh * Math.max(rows.length, 1);
    el("rect", {x: x(band[0]), y: M.t, width: x(band[1]) - x(band[0]), height: bottom - M.t, fill: "#888",
                "fill-opacity": 0.15, "class": "tie-band"}, svg);
    el("line", {x1: x(1), x2: x(1), y1: M.t, y2: bottom, stroke: "#000", "class": "one"}, svg);
    var ax = el("g", {"class": "axis"}, svg);
    ratioTicks(x, lo / pad, hi * pad, 36).forEach(function (v) {
      el("text", {x: x(v), y: bottom + 16, "text-anchor": "middle", "data-ratio": v}, ax, ratioText(v));
      el("line", {x1: x(v), x2: x(v), y1: bottom, y2: bottom + 4}, ax);
    });
    el("text", {x: (left + w) / 2, y: bottom + 36, "text-anchor": "middle"}, ax, chart.x_label);
    rows.forEach(function (r, i) {
      var cy = M.t + rh * i + rh / 2, color = colors[r.winner] || "#000";
      var g = el("g", {"class": "series", "data-series": r.verdict, "data-winner": r.winner}, svg);
      el("text", {x: left - 8, y: cy + 4, "text-anchor": "end", "font-weight": r.host ? null : 600}, g,
         r.name.length > 44 ? r.name.slice(0, 43) + "…" : r.name);
      if (!usable(r.ratio)) {  // timed apart, or a side not ok: said, never drawn as a ratio
        el("text", {x: x(1) + 6, y: cy + 4, fill: "#888"}, g, r.verdict);
        return;
      }
      if (usable(r.lo) && usable(r.hi)) {
        el("line", {x1: x(clamp(r.lo)), x2: x(clamp(r.hi)), y1: cy, y2: cy, stroke: color, "stroke-width": 2, "class": "ci"}, g);
      }
      hover(marker(g, "circle", x(clamp(r.ratio)), cy, color, 4.5), r.name + "\n" + r.verdict + ": " + pair.b + " / " + pair.a +
            " " + ratioValue(r.ratio) + " (95% CI " + ratioValue(r.lo) + " .. " + ratioValue(r.hi) + ", " + r.pairs + " pairs in " +
            r.rounds + " rounds)\nA " + fmt(r.a_us) + " µs, B " + fmt(r.b_us) + " µs" + (r.note ? "\n" + r.note : ""));
    });
    var line = document.createElement("p");
    line.className = "h2h-line";
    line.textContent = "fleet: " + pair.line;
    fig.appendChild(line);
    var verdicts = [], styles = {};
    pair.rows.forEach(function (r) {
      if (verdicts.indexOf(r.verdict) < 0) { verdicts.push(r.verdict); styles[r.verdict] = {color: colors[r.winner] || "#000", mark: "circle"}; }
    });
    legend(fig, chart, verdicts, styles, function () { redraw(fig, chart); });
  }

  function drawTrend(fig, chart) {
    var shown = chart.series.filter(function (s) {
      return !chart.hidden.has(s.name) && (DATA.hosts.indexOf(s.name) < 0 || hostsOn.has(s.name));
    });
    var pts = [];
    shown.forEach(function (s) { pts = pts.concat(s.points); });
    var svg = el("svg", {width: W, height: H, "class": "fb", "data-kind": "trend"}, fig);
    if (!pts.length) {
      el("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}, svg, "nothing to show for the hosts and series switched on");
    } else {
      var ys = pts.map(function (p) { return p.y; });
      var lo = Math.min.apply(null, ys), hi = Math.max.apply(null, ys), pad = (hi - lo) * 0.1 || hi * 0.05;
      var x = linear(-0.5, chart.runs.length - 0.5, M.l, W - M.r), y = linear(lo - pad, hi + pad, H - M.b, M.t);
      var xt = [];
      for (var i = 0; i < chart.runs.length; i += Math.max(1, Math.ceil(chart.runs.length / 10))) xt.push(i);
      axes(svg, x, y, chart.x_label, chart.y_label, xt);
      chart.series.forEach(function (s) {
        var st = HOST_STYLE[s.name] || {color: "#444", mark: "circle"};
        var on = shown.indexOf(s) >= 0;
        var g = el("g", {"class": "series" + (on ? "" : " off"), "data-series": s.name}, svg);
        el("path", {d: s.points.map(function (p, i) { return (i ? "L" : "M") + x(p.x) + "," + y(p.y); }).join(""),
                    fill: "none", stroke: st.color, "stroke-width": 1.4}, g);
        s.points.forEach(function (p) {
          if (p.step) {
            el("line", {x1: x(p.x - 0.5), x2: x(p.x - 0.5), y1: M.t, y2: H - M.b, stroke: "#d62728", "stroke-dasharray": "4,3"}, g);
            el("text", {x: x(p.x), y: M.t + 12, fill: "#d62728", "font-size": 11}, g, p.step);
          }
          hover(marker(g, st.mark, x(p.x), y(p.y), st.color, 3.5), s.name + "\n" + p.run + ": " + fmt(p.y) + " µs" +
                (p.step ? "\n" + p.step : ""));
        });
      });
    }
    legend(fig, chart, chart.series.map(function (s) { return s.name; }), HOST_STYLE, function () { redraw(fig, chart); });
  }

  var DRAW = {fleet: drawXY, speedup: drawXY, roofline: drawRoofline, heatmap: drawHeatmap, forest: drawForest,
              headtohead: drawHeadToHead, trend: drawTrend};

  function redraw(fig, chart) {
    while (fig.childNodes.length > 1) fig.removeChild(fig.lastChild);  // keep the caption
    DRAW[chart.kind](fig, chart);
  }

  var holder = document.getElementById("charts");
  var figures = DATA.charts.map(function (chart) {
    chart.hidden = new Set();
    var fig = document.createElement("figure");
    fig.className = "chart";
    fig.dataset.kind = chart.kind;
    var cap = document.createElement("figcaption");
    cap.textContent = chart.title;
    fig.appendChild(cap);
    holder.appendChild(fig);
    DRAW[chart.kind](fig, chart);
    return {fig: fig, chart: chart};
  });

  var hostBox = document.getElementById("hosts");
  DATA.hosts.forEach(function (host) {
    var label = document.createElement("label");
    var box = document.createElement("input");
    box.type = "checkbox";
    box.checked = true;
    box.dataset.host = host;
    box.addEventListener("change", function () {
      if (box.checked) hostsOn.add(host); else hostsOn.delete(host);
      figures.forEach(function (f) { redraw(f.fig, f.chart); });
    });
    label.appendChild(box);
    label.appendChild(document.createTextNode(" " + host));
    hostBox.appendChild(label);
  });
  document.body.dataset.charts = String(figures.length);  // drawn: for whoever checks the page
})();

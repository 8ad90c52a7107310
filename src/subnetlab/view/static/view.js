// subnetlab view: draws the page's JSON (subnetlab/view/page.py) with d3; node positions from dagre.
// Positions are computed once (dagre, ranks pinned to layers); the slider only changes which edges are drawn.
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("data").textContent);
  const T0 = performance.now();
  const params = new URLSearchParams(location.hash.slice(1));
  const KIND_COLOUR = { q: "#1f77b4", k: "#ff7f0e", v: "#2ca02c", mlp: "#9467bd", logits: "#d62728" };
  const KIND_DASH = { q: null, k: "5,3", v: "1.5,2.5", mlp: null, logits: null };
  const KIND_LABEL = { q: "query (Q)", k: "key (K)", v: "value (V)", mlp: "MLP input", logits: "logits" };
  const KIND_OFFSET = { q: -0.3, k: 0, v: 0.3, mlp: 0, logits: 0 };
  const CAT_COLOUR = { both: "#222222", left: "#1f77b4", right: "#e6550d" };
  const NODE_W = 34, NODE_H = 20;
  const fmt = (x) => (x === null || x === undefined ? "n/a" : (Math.abs(x) >= 1000 || (x !== 0 && Math.abs(x) < 0.001) ? x.toExponential(2) : (+x).toFixed(3)));
  const state = { k: 0, selected: null, clicked: null, show: { both: true, left: true, right: true } };

  // ------------------------------------------------------------------ layout (dagre), shared by every panel
  function dagreLayout(ids, rankOf, layoutEdges) {
    const g = new dagre.graphlib.Graph();
    // ranks are given (dagre's ranker "none"): each node on its layer's rank; dagre orders and places the nodes.
    // dagre doubles edge lengths to leave room for labels, so the given ranks are doubled too.
    g.setGraph({ rankdir: "BT", ranker: "none", nodesep: 6, edgesep: 1, ranksep: 26, marginx: 10, marginy: 10 });
    g.setDefaultEdgeLabel(() => ({}));
    for (const id of ids) g.setNode(String(id), { width: NODE_W, height: NODE_H, rank: 2 * rankOf(id) });
    for (const [a, b] of layoutEdges) if (a !== b && !g.hasEdge(String(a), String(b))) g.setEdge(String(a), String(b), { minlen: 1, weight: 1 });
    dagre.layout(g);
    const pos = {};
    for (const id of ids) { const n = g.node(String(id)); pos[id] = { x: n.x, y: n.y }; }
    const xs = ids.map((id) => pos[id].x), ys = ids.map((id) => pos[id].y);
    const minX = Math.min(...xs), minY = Math.min(...ys);
    for (const id of ids) { pos[id].x -= minX - NODE_W; pos[id].y -= minY - NODE_H; }
    return { pos, width: Math.max(...xs) - minX + 2 * NODE_W, height: Math.max(...ys) - minY + 2 * NODE_H + 10 };
  }

  // the drawing fits its share of the window's width (beside the details column); small graphs grow a little
  function fitScale(L, panels) {
    const room = Math.max(320, (window.innerWidth || 1200) - 420) / panels - 30;
    return Math.min(1.6, room / L.width);
  }

  function rankOfComponent(kind, layer) {
    if (kind === "embedding") return 0;
    if (kind === "head") return 2 * layer + 1;
    if (kind === "mlp") return 2 * layer + 2;
    return 2 * layer + 1; // logits: layer = num_layers
  }

  // ------------------------------------------------------------------ the faithfulness curve read off at k
  function readCurve(curve, k) {
    if (!curve || !curve.points.length) return { text: "no faithfulness measured in these runs", value: null };
    const pts = curve.points;
    const name = "f(" + curve.metric + ")";
    for (const [c, f] of pts) if (c === k) return { text: name + " = " + fmt(f) + " (measured at " + k + ")", value: f };
    if (k < pts[0][0] || k > pts[pts.length - 1][0])
      return { text: name + ": not measured at " + k + " (measured from " + pts[0][0] + " to " + pts[pts.length - 1][0] + ")", value: null };
    for (let i = 0; i + 1 < pts.length; i++) {
      const [c0, f0] = pts[i], [c1, f1] = pts[i + 1];
      if (c0 <= k && k <= c1) {
        const f = f0 + (f1 - f0) * (k - c0) / (c1 - c0);
        return { text: name + " ≈ " + fmt(f) + " (interpolated between " + c0 + " and " + c1 + ")", value: f };
      }
    }
    return { text: "", value: null };
  }

  function curveChart(parent, curve, maxK) {
    const W = 300, H = 150, M = { l: 40, r: 10, t: 10, b: 30 };
    if (!curve || !curve.points.length) return () => {};
    const svg = parent.append("svg").attr("class", "curve").attr("width", W).attr("height", H);
    const x = d3.scaleLinear().domain([0, maxK]).range([M.l, W - M.r]);
    const ys = curve.points.map((p) => p[1]);
    const y = d3.scaleLinear().domain([Math.min(0, ...ys), Math.max(1, ...ys)]).nice().range([H - M.b, M.t]);
    svg.append("g").attr("transform", `translate(0,${H - M.b})`).call(d3.axisBottom(x).ticks(4));
    svg.append("g").attr("transform", `translate(${M.l},0)`).call(d3.axisLeft(y).ticks(4));
    svg.append("text").attr("x", W / 2).attr("y", H - 2).attr("text-anchor", "middle").attr("class", "axis-label").text("items kept");
    svg.append("path").datum(curve.points).attr("fill", "none").attr("stroke", "#444").attr("d", d3.line().x((p) => x(p[0])).y((p) => y(p[1])));
    svg.selectAll("circle.pt").data(curve.points).join("circle").attr("class", "pt").attr("r", 3).attr("cx", (p) => x(p[0])).attr("cy", (p) => y(p[1]))
      .append("title").text((p) => p[0] + " kept: f = " + fmt(p[1]));
    const marker = svg.append("line").attr("stroke", "#d62728").attr("y1", M.t).attr("y2", H - M.b);
    return (k) => marker.attr("x1", x(k)).attr("x2", x(k));
  }

  // ------------------------------------------------------------------ controls shared by the edge and node pages
  function slider(max, initial, label, onChange) {
    const box = d3.select("#controls");
    box.append("label").attr("for", "k").text(label + " ");
    const input = box.append("input").attr("id", "k").attr("type", "range").attr("min", 0).attr("max", max).attr("step", 1)
      .property("value", initial).on("input", () => onChange(+input.property("value")));
    box.append("input").attr("id", "k-number").attr("type", "number").attr("min", 0).attr("max", max).property("value", initial)
      .on("change", function () { const v = Math.max(0, Math.min(max, +this.value)); input.property("value", v); onChange(v); });
    box.append("span").attr("id", "k-of").text(" of " + max);
    return (v) => { input.property("value", v); d3.select("#k-number").property("value", v); onChange(v); };
  }

  function showHealth(runs) {
    const box = d3.select("#health");
    const flagged = runs.filter((r) => r.health && r.health.length);
    if (!flagged.length) { box.append("p").attr("class", "ok").text("Health: no warnings in " + (runs.length === 1 ? "the run" : "any of the " + runs.length + " runs") + "."); return; }
    box.append("h2").text("Health warnings");
    const ul = box.append("ul");
    for (const r of flagged) for (const m of r.health) ul.append("li").attr("class", "warning").text(r.label + ": " + m);
  }

  // ------------------------------------------------------------------ stability: what the sweeps and evaluations recorded
  function showStability(entries) {
    if (!entries || !entries.length) return;
    const box = d3.select("#stability");
    box.append("h2").text("Stability");
    const fmt = (v) => (v === null || v === undefined ? "n/a" : (+v).toFixed(3));
    const interval = (pair) => (pair && pair.length === 2 ? "[" + fmt(pair[0]) + ", " + fmt(pair[1]) + "]" : "n/a");
    const circuits = entries.filter((e) => e.kind === "circuits");
    if (circuits.length) {
      const table = box.append("table").attr("class", "stability").attr("id", "stability-circuits");
      const head = ["source", "target sparsity", "runs", "mean Jaccard (min)", "across steps", "across seeds",
        "kept by every / any", "faithfulness over seeds (n; 95% bootstrap from 5)", "most frequent edges"];
      table.append("tr").selectAll("th").data(head).enter().append("th").text((d) => d);
      for (const e of circuits) {
        const f = e.faithfulness_over_seeds;
        table.append("tr").attr("data-mean-jaccard", e.mean_jaccard).selectAll("td").data([e.source, e.target,
          e.runs.length + " (" + e.runs.join(", ") + ")", fmt(e.mean_jaccard) + " (" + fmt(e.min_jaccard) + ")",
          fmt(e.mean_jaccard_across_steps), fmt(e.mean_jaccard_across_seeds), e.kept_in_every + " / " + e.kept_in_any,
          f ? fmt(f.mean) + " (n = " + f.n + ") " + (f.interval.length ? interval(f.interval)
            : "range " + interval(f.range) + ", no interval") : "n/a",
          e.top_frequency.map((t) => t[0] + " " + fmt(t[1])).join(", ")]).enter().append("td").text((d) => d);
      }
    }
    for (const e of entries.filter((x) => x.kind === "pairs")) {
      box.append("p").attr("class", "stability-pairs").text(e.source + ": " + Math.round(100 * e.level) + "% bootstrap over " +
        e.pairs + " pairs (" + e.resamples + " resamples, seed " + e.seed + "): CPR " + fmt(e.cpr.estimate) + " " +
        interval(e.cpr.interval) + ", CMD " + fmt(e.cmd.estimate) + " " + interval(e.cmd.interval));
    }
  }

  // ------------------------------------------------------------------ the edge pages (single, compare, seeds)
  function edgePage() {
    const G = D.graph, W = G.writers.length, LOGITS = W, E = G.edge_writer.length;
    const names = G.writers.concat(["logits"]);
    const kindOf = (id) => (id === LOGITS ? "logits" : G.writer_kind[id]);
    const layerOf = (id) => (id === LOGITS ? G.shape.layers : G.writer_layer[id]);
    const target = (e) => { const o = G.reader_owner[G.edge_reader[e]]; return o < 0 ? LOGITS : o; };
    const ownersOf = (e) => { const o = G.reader_owners[G.edge_reader[e]]; return o.length ? o : [LOGITS]; };
    const edgeName = (e) => G.writers[G.edge_writer[e]] + "->" + G.readers[G.edge_reader[e]];
    const ids = d3.range(W + 1);
    const mainOrder = D.mode === "seeds" ? D.order : D.runs[0].order;
    const rankOf = (id) => rankOfComponent(kindOf(id), layerOf(id));
    // dagre orders the nodes by the best edges: at most layout_edges of them, and no more ranks crossed in all than
    // layout_span (dagre adds a dummy node per rank an edge crosses: its time grows with that sum)
    const layoutEdges = [];
    let span = 0;
    for (const e of mainOrder.slice(0, Math.min(D.layout_edges, Math.max(D.initial, 1)))) {
      const a = G.edge_writer[e], b = target(e), s = rankOf(b) - rankOf(a);
      if (span + s > D.layout_span) continue;
      span += s; layoutEdges.push([a, b]);
    }
    const L = dagreLayout(ids, rankOf, layoutEdges);
    const rankIn = D.runs.map((r) => { const a = new Int32Array(E); r.order.forEach((e, i) => (a[e] = i)); return a; });
    const seedRank = D.mode === "seeds" ? (() => { const a = new Int32Array(E); D.order.forEach((e, i) => (a[e] = i)); return a; })() : null;
    const panels = D.mode === "compare" ? [0, 1] : [0];
    const curve = D.mode === "seeds" ? D.curve : D.runs[0].curve;

    const summary = d3.select("#summary");
    const what = { single: "one edge circuit", compare: "two edge circuits side by side", seeds: D.runs.length + " edge circuits as each edge's frequency" }[D.mode];
    summary.append("p").text(what + " on a " + G.shape.family + " graph (" + G.shape.layers + " layers x " + G.shape.heads + " heads, " + E + " edges, " + (W + 1) + " nodes).");
    const info = summary.append("p").attr("id", "faithfulness");
    const chartUpdate = curveChart(d3.select("#controls"), curve, E);
    if (curve) summary.append("p").attr("id", "areas").text((curve.cpr !== null && curve.cpr !== undefined ? "CPR " + fmt(curve.cpr) + ", CMD " + fmt(curve.cmd) + " (" + curve.metric + "); " : "No CPR / CMD: these runs measured single circuits, not a curve; ") + "source: " + curve.source + ".");
    const legend = d3.select("#controls").append("div").attr("class", "legend");
    if (D.mode === "compare") {
      for (const [cat, text] of [["both", "in both"], ["left", "only left: " + D.runs[0].label], ["right", "only right: " + D.runs[1].label]]) {
        const item = legend.append("label").attr("class", "item");
        item.append("input").attr("type", "checkbox").attr("id", "show-" + cat).property("checked", true).on("change", function () { state.show[cat] = this.checked; update(state.k); });
        item.append("span").attr("class", "swatch").style("background", CAT_COLOUR[cat]);
        item.append("span").attr("id", "count-" + cat).text(text);
      }
      legend.append("div").attr("class", "note").text("line style: Q solid, K dashed, V dotted");
    } else {
      for (const kind of ["q", "k", "v", "mlp", "logits"]) {
        const item = legend.append("span").attr("class", "item");
        item.append("svg").attr("width", 26).attr("height", 10).append("line").attr("x1", 0).attr("x2", 26).attr("y1", 5).attr("y2", 5)
          .attr("stroke", KIND_COLOUR[kind]).attr("stroke-width", 2).attr("stroke-dasharray", KIND_DASH[kind]);
        item.append("span").text(KIND_LABEL[kind]);
      }
    }

    const views = panels.map((p) => {
      const box = d3.select("#panels").append("div").attr("class", "panel");
      box.append("h2").text(D.mode === "compare" ? (p === 0 ? "left: " : "right: ") + D.runs[p].label : D.mode === "seeds" ? "edge frequency over " + D.runs.length + " runs" : D.runs[0].label);
      box.append("p").attr("class", "count").attr("id", "count-panel-" + p);
      const scale = fitScale(L, panels.length);
      const svg = box.append("svg").attr("class", "graph").attr("data-panel", p).attr("width", L.width * scale).attr("height", L.height * scale)
        .attr("viewBox", `0 0 ${L.width} ${L.height}`);
      const edgeLayer = svg.append("g").attr("class", "edges");
      const nodeLayer = svg.append("g").attr("class", "nodes");
      const nodes = nodeLayer.selectAll("g.node").data(ids).join("g").attr("class", (id) => "node " + kindOf(id))
        .attr("data-name", (id) => names[id]).attr("transform", (id) => `translate(${L.pos[id].x},${L.pos[id].y})`)
        .on("click", (event, id) => { state.clicked = id; details(id); nodes.classed("clicked", (n) => n === id); });
      nodes.append("rect").attr("x", -NODE_W / 2).attr("y", -NODE_H / 2).attr("width", NODE_W).attr("height", NODE_H).attr("rx", 4);
      nodes.append("text").attr("text-anchor", "middle").attr("dy", "0.35em")
        .text((id) => (id === LOGITS ? "logits" : kindOf(id) === "head" ? "h" + G.writer_index[id] : kindOf(id) === "mlp" ? "MLP" : names[id].replace("_embeds", "")));
      nodes.append("title");
      const layerLabels = svg.append("g").attr("class", "layer-labels");
      for (let l = 0; l < G.shape.layers; l++) {
        const hs = ids.filter((id) => kindOf(id) === "head" && layerOf(id) === l);
        if (hs.length) layerLabels.append("text").attr("x", 2).attr("y", L.pos[hs[0]].y + 4).text("L" + l);
      }
      return { svg, edgeLayer, nodes, panel: p };
    });

    function endPoint(e) {
      const t = target(e), kind = G.reader_kind[G.edge_reader[e]];
      const owners = ownersOf(e);
      const x = owners.reduce((s, o) => s + L.pos[o].x, 0) / owners.length;
      return { x: x + KIND_OFFSET[kind] * NODE_W, y: L.pos[t].y + NODE_H / 2 };
    }
    function pathOf(e) {
      const a = L.pos[G.edge_writer[e]], b = endPoint(e);
      const y1 = a.y - NODE_H / 2, mid = (y1 + b.y) / 2;
      return `M${a.x},${y1}C${a.x},${mid} ${b.x},${mid} ${b.x},${b.y}`;
    }
    const absScore = (run, e) => (D.runs[run].score ? Math.abs(D.runs[run].score[e]) : 1);

    function selection(k) {
      if (D.mode === "compare") {
        const l = D.runs[0].order.slice(0, k), r = D.runs[1].order.slice(0, k);
        const inL = new Set(l), inR = new Set(r);
        return { perPanel: [l, r], cat: (e) => (inL.has(e) && inR.has(e) ? "both" : inL.has(e) ? "left" : "right"),
          counts: { both: l.filter((e) => inR.has(e)).length, left: l.filter((e) => !inR.has(e)).length, right: r.filter((e) => !inL.has(e)).length } };
      }
      const chosen = mainOrder.slice(0, k);
      return { perPanel: [chosen], cat: () => "both", counts: null };
    }

    function update(k) {
      state.k = k;
      const sel = selection(k);
      state.selected = sel;
      let drawnTotal = 0, capped = false;
      views.forEach((v) => {
        const run = v.panel;
        let edges = sel.perPanel[run].filter((e) => state.show[sel.cat(e)]);
        const shown = edges.length;
        if (edges.length > D.draw_cap) { edges = edges.slice(0, D.draw_cap); capped = true; }
        drawnTotal += edges.length;
        const maxAbs = Math.max(1e-12, ...edges.map((e) => absScore(run, e)));
        const width = (e) => D.mode === "seeds" ? 0.5 + 3 * D.frequency[e] : 0.6 + 2.6 * absScore(run, e) / maxAbs;
        v.edgeLayer.selectAll("path.edge").data(edges, (e) => e).join(
          (enter) => { const p = enter.append("path").attr("class", "edge"); p.append("title"); return p; })
          .attr("d", pathOf).attr("data-edge", edgeName).attr("data-cat", (e) => sel.cat(e))
          .attr("stroke", (e) => (D.mode === "compare" ? CAT_COLOUR[sel.cat(e)] : KIND_COLOUR[G.reader_kind[G.edge_reader[e]]]))
          .attr("stroke-dasharray", (e) => KIND_DASH[G.reader_kind[G.edge_reader[e]]]).attr("stroke-width", width)
          .select("title").text((e) => edgeName(e) + "\nrank " + (rankIn[run][e] + 1) + (D.runs[run].score ? ", score " + fmt(D.runs[run].score[e]) : "") +
            (D.mode === "seeds" ? ", frequency " + fmt(D.frequency[e]) : "") + (D.mode === "compare" ? ", " + sel.cat(e) : ""));
        const active = new Set(), inCount = {}, outCount = {};
        for (const e of sel.perPanel[run]) {
          if (!state.show[sel.cat(e)]) continue;
          const w = G.edge_writer[e];
          active.add(w); outCount[w] = (outCount[w] || 0) + 1;
          for (const o of ownersOf(e)) { active.add(o); inCount[o] = (inCount[o] || 0) + 1; }
        }
        v.nodes.classed("active", (id) => active.has(id)).select("title")
          .text((id) => names[id] + (id === LOGITS ? "" : " (" + kindOf(id) + (layerOf(id) >= 0 ? ", layer " + layerOf(id) : "") + ")") +
            "\nselected edges in: " + (inCount[id] || 0) + ", out: " + (outCount[id] || 0));
        v.svg.attr("data-edges-drawn", edges.length).attr("data-edges-selected", shown).attr("data-nodes-active", active.size)
          .attr("data-nodes", ids.length);
        d3.select("#count-panel-" + run).text(shown + " edges selected, " + edges.length + " drawn, " + active.size + " of " + ids.length + " nodes touched");
      });
      if (sel.counts) for (const cat of ["both", "left", "right"]) d3.select("#count-" + cat).attr("data-count", sel.counts[cat])
        .text({ both: "in both", left: "only left", right: "only right" }[cat] + ": " + sel.counts[cat]);
      const read = readCurve(curve, k);
      info.text(k + " edges kept. " + (D.mode === "compare" ? "left: " : "") + read.text + (D.mode === "compare" ? "; right: " + readCurve(D.runs[1].curve, k).text : ""))
        .attr("data-f", read.value === null ? "" : read.value);
      chartUpdate(k);
      d3.select("#drawnote").text(capped ? " Drawing capped: only the best " + D.draw_cap + " selected edges per panel are drawn (by the ranking); every selected edge is counted in the totals and in a node's list." :
        " Every selected edge is drawn (up to " + D.draw_cap + " per panel; beyond that the best " + D.draw_cap + " are drawn).");
      if (state.clicked !== null) details(state.clicked);
      return drawnTotal;
    }

    function details(id) {
      const box = d3.select("#details").html("");
      box.append("h2").text(names[id]);
      const sel = state.selected;
      const chosen = D.mode === "compare" ? Array.from(new Set(sel.perPanel[0].concat(sel.perPanel[1]))) : sel.perPanel[0];
      const incoming = chosen.filter((e) => ownersOf(e).includes(id)), outgoing = chosen.filter((e) => G.edge_writer[e] === id);
      for (const [title, list] of [["incoming", incoming], ["outgoing", outgoing]]) {
        box.append("h3").text(title + " edges among the selected: " + list.length);
        const tbl = box.append("table").attr("class", "edges-" + title);
        const cols = ["edge", "input"].concat(D.mode === "compare" ? ["where", "score (left)", "score (right)"] : D.mode === "seeds" ? ["frequency"] : ["rank", "score"]);
        tbl.append("tr").selectAll("th").data(cols).join("th").text((c) => c);
        const order = D.mode === "seeds" ? seedRank : rankIn[0];
        list.sort((a, b) => order[a] - order[b]);
        for (const e of list.slice(0, 40)) {
          const row = [edgeName(e), G.reader_kind[G.edge_reader[e]]];
          if (D.mode === "compare") row.push(sel.cat(e), D.runs[0].score ? fmt(D.runs[0].score[e]) : "", D.runs[1].score ? fmt(D.runs[1].score[e]) : "");
          else if (D.mode === "seeds") row.push(fmt(D.frequency[e]));
          else row.push(rankIn[0][e] + 1, D.runs[0].score ? fmt(D.runs[0].score[e]) : "");
          tbl.append("tr").selectAll("td").data(row).join("td").text((c) => c);
        }
        if (list.length > 40) box.append("p").text("… and " + (list.length - 40) + " more");
      }
    }

    showHealth(D.runs);
    d3.select("footer").append("div").attr("id", "layoutnote").text("Layout: dagre, ranks pinned to the layers (embeddings, each layer's heads, " +
      "its MLP, the logits); the order within a layer from the best " + layoutEdges.length + " edges (at most " + D.layout_edges + ", crossing at most " +
      D.layout_span + " ranks in all); positions stay fixed while the slider moves. Edges are drawn up to " + D.draw_cap + " per panel, best first.");
    const setK = slider(E, D.initial, "edges kept (the top k of the ranking)", update);
    d3.select("#controls").append("p").attr("class", "note").text(
      D.mode === "seeds" ? "Ranking: each edge's frequency over the runs (ties: mean |score|). Edge width: frequency."
        : "Ranking: " + (D.runs[0].kept !== null ? "the run's kept edges first, then " : "") + "by score (" + (D.runs[0].score_sign || "absolute") +
          (D.runs[0].score_sign === "signed" ? ": highest first" : ": largest magnitude first") + "). Edge width: |score|.");
    return setK;
  }

  // ------------------------------------------------------------------ head/MLP subnetworks (prune, core)
  function nodePage() {
    const N = D.components.length, LH = D.layers * D.heads;
    const kindOf = (i) => (i < LH ? "head" : "mlp");
    const layerOf = (i) => (i < LH ? Math.floor(i / D.heads) : i - LH);
    const ids = d3.range(N);
    const L = dagreLayout(ids, (i) => rankOfComponent(kindOf(i), layerOf(i)), []);
    // no edges to order a layer's heads by: dagre's x positions of a layer, given to its heads in index order
    for (let l = 0; l < D.layers; l++) {
      const hs = d3.range(l * D.heads, (l + 1) * D.heads), xs = hs.map((i) => L.pos[i].x).sort((a, b) => a - b);
      hs.forEach((i, j) => (L.pos[i].x = xs[j]));
    }
    const rank = new Int32Array(N); D.order.forEach((c, i) => (rank[c] = i));
    d3.select("#summary").append("p").text(D.runs.length + " head/MLP subnetwork(s) (" + D.layers + " layers x " + D.heads + " heads): colour = fraction of runs keeping the component; thick outline = the core (kept by every run: " + D.core + ").");
    const info = d3.select("#summary").append("p").attr("id", "faithfulness");
    const box = d3.select("#panels").append("div").attr("class", "panel");
    box.append("h2").text("components by layer");
    box.append("p").attr("class", "count").attr("id", "count-panel-0");
    const scale = fitScale(L, 1);
    const svg = box.append("svg").attr("class", "graph").attr("data-panel", 0).attr("width", L.width * scale).attr("height", L.height * scale)
      .attr("viewBox", `0 0 ${L.width} ${L.height}`);
    const colour = d3.scaleSequential(d3.interpolateBlues).domain([0, 1]);
    const nodes = svg.append("g").attr("class", "nodes").selectAll("g.node").data(ids).join("g").attr("class", (i) => "node " + kindOf(i))
      .attr("data-name", (i) => D.components[i]).attr("transform", (i) => `translate(${L.pos[i].x},${L.pos[i].y})`)
      .on("click", (event, i) => details(i));
    nodes.append("rect").attr("x", -NODE_W / 2).attr("y", -NODE_H / 2).attr("width", NODE_W).attr("height", NODE_H).attr("rx", 4)
      .style("fill", (i) => colour(D.frequency[i])).classed("core", (i) => D.frequency[i] === 1);
    nodes.append("text").attr("text-anchor", "middle").attr("dy", "0.35em").text((i) => (kindOf(i) === "head" ? "h" + (i % D.heads) : "MLP"))
      .style("fill", (i) => (D.frequency[i] > 0.6 ? "white" : "black"));
    nodes.append("title").text((i) => D.components[i] + ": kept by " + fmt(D.frequency[i]) + " of the runs\ngates: " + D.runs.map((r) => fmt(r.gates[i])).join(", "));
    for (let l = 0; l < D.layers; l++) svg.append("text").attr("class", "layer-label").attr("x", 2).attr("y", L.pos[l * D.heads].y + 4).text("L" + l);

    function update(k) {
      state.k = k;
      const chosen = new Set(D.order.slice(0, k));
      nodes.classed("active", (i) => chosen.has(i));
      svg.attr("data-nodes", N).attr("data-nodes-active", chosen.size).attr("data-edges-drawn", 0).attr("data-edges-selected", 0);
      d3.select("#count-panel-0").text(chosen.size + " of " + N + " components kept (the most frequent first)");
      info.text(k + " components. " + readCurve(D.runs[0].curve, k).text);
    }
    function details(i) {
      const box = d3.select("#details").html("");
      box.append("h2").text(D.components[i]);
      box.append("p").text("kept by " + fmt(D.frequency[i]) + " of the runs" + (D.frequency[i] === 1 ? " (in the core)" : "") + "; rank " + (rank[i] + 1));
      const tbl = box.append("table");
      tbl.append("tr").selectAll("th").data(["run", "seed", "target", "gate"]).join("th").text((c) => c);
      for (const r of D.runs) tbl.append("tr").selectAll("td").data([r.label, r.seed, r.target, fmt(r.gates[i])]).join("td").text((c) => (c === null ? "" : c));
    }
    showHealth(D.runs);
    return slider(N, D.initial, "components kept (the most frequent k)", update);
  }

  // ------------------------------------------------------------------ start, and the self-test the browser test reads
  showStability(D.stability);
  const setK = D.mode === "nodes" ? nodePage() : edgePage();
  setK(params.has("k") ? +params.get("k") : D.initial);
  if (params.has("click")) {
    const node = d3.selectAll("g.node").filter(function () { return this.dataset.name === params.get("click"); });
    if (!node.empty()) node.dispatch("click");
  }
  const count = (cat) => { const el = document.getElementById("count-" + cat); return el ? +el.dataset.count : null; };
  const record = () => {
    const svgs = Array.from(document.querySelectorAll("svg.graph"));
    return { k: state.k, panels: svgs.map((s) => ({ nodes: s.querySelectorAll("g.node").length, active: s.querySelectorAll("g.node.active").length,
      edges: s.querySelectorAll("path.edge").length, selected: +s.dataset.edgesSelected })),
      both: count("both"), left: count("left"), right: count("right") };
  };
  const renderMs = performance.now() - T0, loadMs = performance.now();  // the script; since navigation started
  d3.select("#drawnote").append("span").attr("id", "render-time").text(" Drawn in " + renderMs.toFixed(0) + " ms (" + loadMs.toFixed(0) + " ms since the page was opened).");
  if (params.has("selftest")) {
    const out = { render_ms: renderMs, load_ms: loadMs, initial: record(), steps: [] };
    for (const k of params.get("selftest").split(",").map(Number)) {
      const t = performance.now(); setK(k); out.steps.push(Object.assign(record(), { ms: performance.now() - t }));
    }
    setK(params.has("k") ? +params.get("k") : D.initial);
    document.getElementById("selftest").textContent = JSON.stringify(out);
  }
})();

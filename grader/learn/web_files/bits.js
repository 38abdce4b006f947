// quantize: step the bits down and watch each weight of one real group of 32 snap to the nearest allowed
// level (ticks); beside it, what the teacher quantized at that width writes against full precision, and
// how far its next-character distribution moved (KL) and how often its likeliest character stayed (top-1).
"use strict";
(() => {
  const { el, sleep } = Kata;
  const SVG = "http://www.w3.org/2000/svg";
  const W = 1000, PAD = 30, AXIS = 118;
  let view = null;
  let slider = null;

  function svg(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    return node;
  }

  function buttons() {
    slider = el("input", { type: "range", min: 2, max: 8, step: 1, value: 8, name: "bits", disabled: true,
      "aria-label": "bits per weight" });
    slider.addEventListener("input", () => view && show(view.run, Number(slider.value)));
    return [el("label", {}, "bits (8 down to 2)", slider)];
  }

  function reset(stage, run) {
    const span = Math.max(...run.values.map(Math.abs)) || 1;
    const x = (v) => PAD + ((v + span) / (2 * span)) * (W - 2 * PAD);
    const line = svg("svg", { viewBox: `0 0 ${W} 150`, class: "numberline", role: "img" });
    line.append(svg("line", { x1: PAD, x2: W - PAD, y1: AXIS, y2: AXIS, class: "axis" }));
    const ticks = svg("g", {});
    line.append(ticks);
    for (const v of run.values) line.append(svg("line", { x1: x(v), x2: x(v), y1: 6, y2: 20, class: "value" }));
    const markers = run.values.map(() => {
      const m = svg("circle", { r: 5, cx: 0, cy: 0, class: "marker" });
      line.append(m);
      return m;
    });
    for (const [v, label] of [[-span, (-span).toFixed(4)], [0, "0"], [span, "+" + span.toFixed(4)]]) {
      const t = svg("text", { x: x(v), y: 146, "text-anchor": "middle" });
      t.textContent = label;
      line.append(t);
    }
    view = {
      run, x, line, ticks, markers,
      bits: el("span", { class: "bits-readout", "data-bits-shown": "" }),
      levels: el("span", { class: "status" }),
      full: el("p", { class: "text", text: run.options.prompt + run.full_text }),
      now: el("p", { class: "text" }),
      nowLabel: el("span", {}),
      figures: el("div", { class: "figures" }),
    };
    const weight = `${run.options.weight}, weights ${run.first} to ${run.first + run.values.length - 1}`;
    stage.replaceChildren(
      el("p", { class: "status", text: `One group of 32 real weights (${weight}, along its input axis): the grey strokes at the top are their values, each dot one weight at the nearest allowed level (the ticks), piled where several land.` }),
      el("div", {}, view.bits, " ", view.levels),
      line,
      el("div", { class: "compare" },
        el("span", { text: "full precision" }), view.full,
        view.nowLabel, view.now),
      view.figures,
    );
    slider.disabled = false;
  }

  function show(run, bits) {
    const w = run.rows.find((r) => r.bits === bits);
    if (!w) return;
    Kata.root.dataset.bits = String(bits);
    slider.value = String(bits);
    slider.setAttribute("aria-valuetext", `${bits} bits`);
    view.bits.textContent = `${bits} bits`;
    view.levels.textContent = `${w.levels.length} allowed levels, one step ${w.step.toFixed(5)}`;
    view.ticks.replaceChildren(...w.levels.map((l) => svg("line", {
      x1: view.x(l), x2: view.x(l), y1: AXIS - 6, y2: AXIS + 6, class: "tick" })));
    const piles = new Map();
    w.snapped.forEach((v, i) => {
      const rank = piles.get(v) || 0;
      piles.set(v, rank + 1);
      view.markers[i].style.transform = `translate(${view.x(v)}px, ${AXIS - 12 - Math.min(rank, 15) * 5.5}px)`;
      view.markers[i].dataset.snapped = String(v);
    });
    const full = run.full_text;
    view.nowLabel.textContent = `${bits} bits`;
    view.now.replaceChildren(run.options.prompt, ...Array.from(w.text, (ch, i) =>
      ch === full[i] ? ch : el("span", { class: "diff", title: `full precision wrote ${JSON.stringify(full[i])}`, text: ch })));
    const differ = Array.from(w.text).filter((ch, i) => ch !== full[i]).length;
    view.figures.replaceChildren(
      el("span", { "data-kl": w.kl }, `KL from full precision ${w.kl.toFixed(4)} nats`),
      el("span", { "data-top1": w.top1 }, `top-1 agreement ${(100 * w.top1).toFixed(1)}%`),
      el("span", {}, `${differ} of ${w.text.length} characters differ (underlined)`),
      el("span", {}, `teacher ${(w.model_bytes / 1e6).toFixed(2)} MB (float32: ${(run.float_bytes / 1e6).toFixed(2)} MB)`));
  }

  async function play(run, mine) {
    for (const r of run.rows) {
      show(run, r.bits);
      await sleep(900, mine);
    }
  }

  Kata.widget({ reset, play, buttons });
})();

// cache: the same sentence written twice, re-reading the whole text for every character, then remembering
// it (a KV cache). Each character's bar is its work: token positions pushed through each layer, as the
// model's own counter counted them.
"use strict";
(() => {
  const { el, shown, sleep } = Kata;
  let view = null;

  function lane(title, key) {
    const total = el("span", { class: "total", "data-total": key, text: "0" });
    const text = el("span", {});
    const meter = el("div", { class: "meter", "data-lane": key });
    const node = el("div", { class: "lane" }, el("h2", {}, el("span", { text: title }), total),
      el("p", { class: "text" }, el("span", { class: "prompt", text: view.prompt }), text), meter);
    return { node, total, text, meter, key };
  }

  function reset(stage, run) {
    view = { prompt: run.options.prompt, end: el("div", {}) };
    view.lanes = [
      lane("1. Re-read everything: the whole text through every layer, for every character", "naive"),
      lane("2. Remember it: each character through each layer once (your KV cache)", "cached"),
    ];
    if (run.sources && run.sources[0].own) view.lanes[1].node.querySelector("h2 span").textContent =
      "2. Remember it: each character through each layer once (the model's own KV cache)";
    stage.replaceChildren(
      el("p", { class: "status", text: "Work per character: token positions pushed through each layer (the model's own counter)." }),
      ...view.lanes.map((l) => l.node), view.end);
  }

  async function playLane(run, l, mine) {
    const steps = run[l.key];
    const most = Math.max(...run.naive.map((s) => s.work));
    for (const s of steps) {
      l.text.append(run.vocab[s.token]);
      l.meter.append(
        el("span", { class: "tok", text: shown(run.vocab[s.token]) }),
        el("div", { class: `bar lane-${l.key}`, "data-work": s.work, style: `width:${(100 * s.work) / most}%` }),
        el("span", { class: "n", text: `${s.work}` }));
      l.total.textContent = `${s.positions} token passes per layer`;
      await sleep(160, mine);
    }
  }

  async function play(run, mine) {
    for (const l of view.lanes) await playLane(run, l, mine);
    const [num, den] = run.ratio;
    const naive = run.naive[run.naive.length - 1].positions;
    const cached = run.cached[run.cached.length - 1].positions;
    view.end.append(
      el("p", { class: "summary", "data-ratio": `${num}/${den}` },
        `${run.same ? "\u2713 Same sentence" : "\u2717 A DIFFERENT sentence (the cache changed what the model writes)"}, `
        + `${cached} token passes against ${naive}: ${num}/${den} of the work `
        + `(${run.macs_ratio.toFixed(2)}\u00d7 the multiply-accumulates).`));
  }

  Kata.widget({ reset, play });
})();

// stack: `kata play stack`'s rows filling in as each finishes (each timed against the row before), each
// trick's speed-up, and the sentence that ties them together.
"use strict";
(() => {
  const { el, sleep } = Kata;
  const ROWS = 4; // re-read everything, + KV cache, + int8 weights, + speculative
  let view = null;

  function reset(stage, run) {
    const o = run.options;
    view = { body: el("tbody", {}), end: el("div", {}), drawn: 0, run };
    const head = ["way of serving the teacher", "chars/s", "\u00d7 before", "weights", "cache", "MACs/char", "text as float32"];
    stage.replaceChildren(
      el("p", { class: "status", text: `${o.n} characters after ${JSON.stringify(o.prompt)}, greedy; each row: at least ${o.rounds} rounds taking turns with the row before, x before their median ratio. ${run.blas || ""}` }),
      el("table", { class: "stack" }, el("thead", {}, el("tr", {}, ...head.map((h) => el("th", { scope: "col", text: h })))), view.body),
      view.end);
    pending();
  }

  function pending() {
    view.body.querySelector("tr.pending")?.remove();
    if (view.drawn < ROWS) view.body.append(el("tr", { class: "pending" }, el("td", { colspan: 7, text: "measuring the next bargain\u2026" })));
  }

  function mb(bytes) { return `${(bytes / 1e6).toFixed(2)} MB`; }

  function draw(row) {
    const speedup = row.speedup === null ? "" : `${row.speedup.toFixed(2)}\u00d7 ${row.speedup >= 1 ? "\u25b2" : "\u25bc"}`;
    const tr = el("tr", { class: "arrived", "data-row": row.name },
      el("th", { scope: "row", text: row.name }),
      el("td", {}, `${row.chars_per_second.toFixed(0)}`,
        el("span", { class: "speed", "data-cps": row.chars_per_second, "aria-hidden": "true" })),
      el("td", { "data-speedup": row.speedup ?? "", text: speedup }),
      el("td", { text: mb(row.weight_bytes) }),
      el("td", { text: row.cache_bytes ? `${(row.cache_bytes / 1e3).toFixed(1)} kB` : "0" }),
      el("td", { text: Math.round(row.macs_per_token).toLocaleString("en") }),
      el("td", { text: row.same ? "same" : "differs" }));
    view.body.querySelector("tr.pending")?.remove();
    view.body.append(tr);
    if (row.note) view.body.append(el("tr", {}, el("td", { class: "note", colspan: 7, text: row.note })));
    view.drawn += 1;
    const bars = [...view.body.querySelectorAll(".speed")]; // each against the fastest so far
    const fastest = Math.max(...bars.map((b) => Number(b.dataset.cps)));
    for (const b of bars) b.style.width = `${(70 * Number(b.dataset.cps)) / fastest}px`;
    pending();
  }

  function part(p) {
    if (p.row) draw(p.row);
  }

  async function play(run, mine) {
    while (view.drawn < run.rows.length) { // a replay: the rows again, one by one
      await sleep(500, mine);
      draw(run.rows[view.drawn]);
    }
    view.body.querySelector("tr.pending")?.remove();
    const first = run.rows[0], last = run.rows[run.rows.length - 1];
    view.end.append(
      el("p", { class: "summary", "data-kept": run.kept ? "yes" : "no" },
        `${run.kept ? "\u2713" : "\u2717"} Speculative decoding wrote ${run.kept ? "exactly" : "NOT"} what the int8 teacher writes on its own; `
        + `all together ${run.overall.toFixed(2)}\u00d7 the speed of re-reading everything, in ${mb(last.weight_bytes)} of weights instead of ${mb(first.weight_bytes)}.`),
      el("p", { class: "text", text: run.options.prompt + last.text }),
      el("p", { class: "sentence", text: run.sentence }));
  }

  Kata.widget({ reset, part, play });
})();

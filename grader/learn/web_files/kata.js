// kata play --web: what every widget shares. A widget script calls Kata.widget({...}) with
//   reset(stage, run)   draw the empty stage for a run
//   part(part, run)     a part of the run as it arrives (rows of a slow widget)
//   play(run)           animate the whole run (async), ending in its end state
// The run comes embedded in the page (a notebook) or from GET /api/WIDGET on the server the page came from.
"use strict";
const Kata = (() => {
  const config = JSON.parse(document.getElementById("kata-config").textContent);
  const root = document.getElementById("kata");
  const query = new URLSearchParams(location.search);
  const token = query.get("token") || "";
  const reducedMotion = window.matchMedia("(prefers-reduced-motion: reduce)").matches;
  let generation = 0; // each play bumps it: an older play's timers stop drawing

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (value !== null && value !== undefined && value !== false) node.setAttribute(key, value);
    }
    for (const child of children) node.append(child);
    return node;
  }

  // A character as a chip or a meter shows it: blanks and line ends made visible.
  function shown(ch) {
    return ch === " " ? "\u2423" : ch === "\n" ? "\u21b5" : ch === "\t" ? "\u21e5" : ch;
  }

  class Stopped extends Error {}
  function sleep(ms, mine) {
    return new Promise((resolve, reject) => {
      setTimeout(() => (mine === generation ? resolve() : reject(new Stopped())), reducedMotion ? 0 : ms);
    });
  }

  function link(widget, extra) {
    const q = new URLSearchParams({ token });
    for (const [k, v] of Object.entries(extra || {})) q.set(k, v);
    return (widget ? "/" + widget : "/") + "?" + q.toString();
  }

  function crumbs() {
    const nav = root.querySelector(".crumbs");
    if (config.run) { nav.remove(); return; } // embedded: no server to go to
    nav.append(el("a", { href: link(null), text: "all widgets" }));
    for (const name of Object.keys(config.titles)) {
      nav.append(el("a", { href: link(name), "aria-current": name === config.widget ? "page" : null, text: name }));
    }
  }

  function sources(run) {
    const box = root.querySelector(".sources");
    box.replaceChildren();
    for (const s of run.sources || []) {
      const tasks = s.tasks.join(" and ");
      if (s.own) {
        box.append(el("p", { class: "own", "data-source": "own" },
          el("strong", { text: "Reference run, not your code yet:" }),
          `the model's own code plays here, since your ${s.kata} ${s.tasks.length > 1 ? "tasks" : "task"} ${tasks} `
          + "must pass first. Finish it, then ", el("code", { text: `kata grade ${s.kata}` }), " and play again."));
      } else {
        box.append(el("p", { class: "yours", "data-source": "kata" },
          el("strong", { text: `${s.kata}:` }), `running ${s.says}`));
      }
    }
  }

  function problem(run) {
    const box = root.querySelector(".problem");
    box.replaceChildren();
    box.hidden = !run.error;
    if (!run.error) return;
    const f = run.finish;
    if (f) {
      root.dataset.finish = `${f.kata}:${f.task}`;
      box.append(el("p", {},
        el("strong", { text: `Finish task ${f.task} of ${f.kata}` }),
        ` to play this widget: ${f.function} still raises NotImplementedError. Write it, check it with `,
        el("code", { text: f.command }), ", then run again."));
    }
    box.append(el("p", { class: "status", text: f ? `(${run.error})` : `This run stopped: ${run.error}` }));
  }

  function controls(widget) {
    const form = root.querySelector(".controls");
    const fields = {};
    if (!config.run) {
      for (const [name, p] of Object.entries(config.params)) {
        const given = query.get(name);
        const input = typeof p.default === "number"
          ? el("input", { type: "number", min: p.low, max: p.high, step: 1, value: given ?? p.default, name })
          : el("input", { type: "text", value: given ?? p.default, name, spellcheck: "false" });
        fields[name] = input;
        form.append(el("label", {}, `${name}: ${p.help}`, input));
      }
    }
    const play = el("button", { type: "submit", class: "primary", "data-action": "play", text: "\u25b6 Play" });
    form.append(play);
    const again = config.run ? null : el("button", { type: "button", "data-action": "run-again", text: "\u21bb Run again" });
    if (again) form.append(again);
    for (const extra of widget.buttons ? widget.buttons(form) : []) form.append(extra);
    form.addEventListener("submit", (event) => { event.preventDefault(); start(widget, fields, false); });
    if (again) again.addEventListener("click", () => start(widget, fields, true));
    return fields;
  }

  let current = null; // the run last fetched (or embedded)

  async function fetchRun(widget, fields, mine) {
    const q = new URLSearchParams({ token, stream: "1" });
    for (const [name, input] of Object.entries(fields)) q.set(name, input.value);
    const response = await fetch(`/api/${config.widget}?${q}`);
    if (!response.ok) {
      const said = await response.json().catch(() => ({ error: response.statusText }));
      return { error: said.error, finish: null };
    }
    const run = { rows: [] };
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffered = "";
    for (;;) {
      const { value, done } = await reader.read();
      buffered += decoder.decode(value || new Uint8Array(), { stream: !done });
      let end;
      while ((end = buffered.indexOf("\n")) >= 0) {
        const part = JSON.parse(buffered.slice(0, end));
        buffered = buffered.slice(end + 1);
        take(widget, run, part, mine);
      }
      if (done) return run;
    }
  }

  function take(widget, run, part, mine) {
    if (part.row) run.rows.push(part.row); else Object.assign(run, part);
    if (mine !== generation) return;
    if (part.sources) { sources(run); widget.reset(root.querySelector(".stage"), run); }
    if (widget.part) widget.part(part, run);
  }

  async function start(widget, fields, fresh) {
    const mine = ++generation;
    root.dataset.state = "loading";
    const stage = root.querySelector(".stage");
    let run = current;
    try {
      if (!run || fresh) {
        stage.replaceChildren(el("p", { class: "status", text: "running\u2026 (kata code runs in its jail)" }));
        problem({});
        run = await fetchRun(widget, fields, mine);
        current = run;
      } else {
        sources(run);
        widget.reset(stage, run); // play draws the rows again, one by one
      }
      if (mine !== generation) return;
      problem(run);
      if (run.error) { root.dataset.state = "error"; return; }
      root.dataset.state = "playing";
      await widget.play(run, mine);
      if (mine === generation) root.dataset.state = "done";
    } catch (err) {
      if (err instanceof Stopped) return;
      problem({ error: String(err.message || err) });
      root.dataset.state = "error";
      throw err;
    }
  }

  function widget(w) {
    crumbs();
    const fields = controls(w);
    if (config.run) {
      current = config.run;
      current.rows = current.rows || [];
    }
    root.querySelector(".stage").replaceChildren(el("p", { class: "status", text: "Press \u25b6 Play (or Enter)." }));
    if (config.autoplay || query.get("autoplay") === "1") start(w, fields, false);
    else root.querySelector('[data-action="play"]').focus();
  }

  return { config, root, el, shown, sleep, widget, link, reducedMotion, get generation() { return generation; } };
})();

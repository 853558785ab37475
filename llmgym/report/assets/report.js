// Episode replay of the llmgym run report: the episodes are embedded as JSON in #llmgym-data.
// State in the URL hash: #r=RUN&e=EVALUATION&k=POLICY&p=EPISODE&s=STEP (indices; POLICY 0 greedy,
// 1 sampled, 2 training: the episodes of training recorded after evaluation EVALUATION).
(function () {
  "use strict";
  var runs = JSON.parse(document.getElementById("llmgym-data").textContent);
  var root = document.getElementById("replay");
  if (!root) { return; }
  var el = function (id) { return document.getElementById(id); };
  var state = { r: 0, e: 0, k: 0, p: 0, s: 0 };
  var POLICIES = ["greedy", "sampled", "training"];
  function kind(ep) { var k = POLICIES.indexOf(ep.policy); return k < 0 ? 0 : k; }
  function group(ep) { return ep.evaluation * POLICIES.length + kind(ep); }

  // Every value put into HTML goes through esc (text and attribute values alike), numbers included:
  // the records are files anyone may have edited.
  function esc(text) {
    return String(text).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;", "'": "&#39;" }[c];
    });
  }
  function num(v, digits) { return v === undefined || v === null ? "–" : Number(v).toFixed(digits === undefined ? 3 : digits); }
  function evaluations(run) {
    var seen = {}, out = [];
    run.episodes.forEach(function (ep) {
      if (!(group(ep) in seen)) { seen[group(ep)] = true; out.push(ep); }
    });
    return out;
  }
  function episodesOf(run, evaluation, k) {
    return run.episodes.filter(function (ep) { return ep.evaluation === evaluation && kind(ep) === k; });
  }
  function options(select, items, value) {
    select.innerHTML = items.map(function (it) {
      return "<option value=\"" + esc(it[0]) + "\"" + (it[0] === value ? " selected" : "") + ">" + esc(it[1]) + "</option>";
    }).join("");
  }
  function clampState() {
    state.r = Math.min(Math.max(0, state.r), runs.length - 1);
    var run = runs[state.r];
    var evals = evaluations(run);
    if (!evals.some(function (ep) { return ep.evaluation === state.e && kind(ep) === state.k; })) {
      state.e = evals.length ? evals[0].evaluation : 0;
      state.k = evals.length ? kind(evals[0]) : 0;
    }
    var eps = episodesOf(run, state.e, state.k);
    if (!eps.some(function (ep) { return ep.episode === state.p; })) { state.p = eps.length ? eps[0].episode : 0; }
    var episode = current();
    var n = episode ? episode.steps.length : 0;
    state.s = Math.min(Math.max(0, state.s), Math.max(0, n - 1));
  }
  function current() {
    var run = runs[state.r];
    return episodesOf(run, state.e, state.k).filter(function (ep) { return ep.episode === state.p; })[0];
  }
  function probTable(step) {
    var rows = step.candidates.map(function (c, i) {
      var p = step.probs[i] === null ? 0 : Number(step.probs[i]);
      return "<tr class=\"cand" + (i === step.chosen ? " chosen" : "") + "\" data-prob=\"" + esc(p) + "\">" +
        "<td class=\"cand-name\" title=\"" + esc(c) + "\">" + (i === step.chosen ? "&#9654; " : "") + esc(c) + "</td>" +
        "<td class=\"bar\"><div style=\"width:" + (100 * p).toFixed(2) + "%\"></div></td>" +
        "<td class=\"p\">" + num(p) + "</td></tr>";
    }).join("");
    return "<table class=\"probs\"><tbody>" + rows + "</tbody></table>";
  }
  function generated(step) {
    var body;
    if (step.tokens && step.token_log_probs) {
      body = step.tokens.map(function (t, i) {
        var lp = step.token_log_probs[i], p = lp === null || lp === undefined ? 0 : Math.exp(lp);
        var shade = "rgba(0,114,178," + (0.08 + 0.5 * p).toFixed(3) + ")";
        return "<span class=\"tok\" data-logprob=\"" + esc(lp) + "\" title=\"log-prob " + num(lp) + " (p " + num(p) + ")\" style=\"background:" +
          shade + "\"><span class=\"t\">" + esc(t) + "</span><sub>" + num(lp, 2) + "</sub></span>";
      }).join("");
    } else {
      body = esc(step.text || "");
    }
    var flag = step.parse_failed ? "<span class=\"badge bad parse-failed\">parse failed: fallback action</span>" :
      "<span class=\"badge ok\">parsed</span>";
    return "<h3>generated text <span class=\"muted\">(tokens with their log-probs)</span></h3><div class=\"gen\">" + body + "</div><p>" + flag + " action <b class=\"action\">" +
      esc(step.action) + "</b></p>";
  }
  function render() {
    clampState();
    var run = runs[state.r];
    options(el("rp-run"), runs.map(function (r, i) { return [i, r.name]; }), state.r);
    options(el("rp-eval"), evaluations(run).map(function (ep) {
      var name = ep.policy === "training" ? "training after #" + ep.evaluation + ", ended @ " + ep.env_steps + " steps (sampled)" :
        "#" + ep.evaluation + " " + ep.label + " @ " + ep.env_steps + " steps (" + ep.policy + ")";
      return [group(ep), name];
    }), state.e * POLICIES.length + state.k);
    options(el("rp-episode"), episodesOf(run, state.e, state.k).map(function (ep) {
      return [ep.episode, "episode " + ep.episode + (ep.seed >= 0 ? " (seed " + ep.seed + ")" : " (env 0)")];
    }), state.p);
    var episode = current();
    if (!episode) { el("rp-view").innerHTML = "<p class=\"muted\">This run recorded no episode.</p>"; return; }
    var n = episode.steps.length, step = episode.steps[state.s];
    el("rp-step").max = Math.max(0, n - 1);
    el("rp-step").value = state.s;
    el("rp-position").textContent = "step " + (state.s + 1) + " / " + n + (episode.length > n ? " (of " + episode.length + ")" : "");
    el("rp-episode-info").innerHTML = "<span class=\"badge " + (episode.success ? "ok\">success" : "bad\">failure") + "</span>" +
      "return <b>" + num(episode.episode_return) + "</b> · " + esc(episode.length) + " steps · agent " + esc(run.agent);
    var decision = step.candidates ? "<h3>candidate probabilities</h3>" + probTable(step) : generated(step);
    var stats = "<table class=\"stats\"><tr><td>action</td><td><b>" + esc(step.action) + "</b></td></tr>" +
      "<tr><td>reward</td><td class=\"reward\">" + num(step.reward) + "</td></tr>" +
      "<tr><td>value</td><td>" + num(step.value) + "</td></tr>" +
      "<tr><td>advantage</td><td>" + num(step.advantage) + "</td></tr>" +
      "<tr><td>log-prob</td><td>" + num(step.log_prob) + "</td></tr></table>";
    el("rp-view").innerHTML = "<div class=\"step-grid\"><div class=\"obs\"><h3>observation</h3><pre>" + esc(step.observation) +
      "</pre>" + stats + "</div><div class=\"decision\">" + decision + "</div></div>";
    el("rp-timeline").innerHTML = episode.steps.map(function (st, i) {
      return "<button type=\"button\" data-step=\"" + i + "\" class=\"" + (i === state.s ? "current" : "") + "\" title=\"reward " +
        num(st.reward) + "\">" + (i + 1) + ". " + esc(String(st.action).slice(0, 24)) + "</button>";
    }).join("");
    var hash = "#r=" + state.r + "&e=" + state.e + "&k=" + state.k + "&p=" + state.p + "&s=" + state.s;
    if (window.location.hash !== hash && window.history && window.history.replaceState) {
      try { window.history.replaceState(null, "", hash); } catch (err) { /* file:// in some browsers */ }
    }
  }
  function readHash() {
    window.location.hash.replace(/^#/, "").split("&").forEach(function (part) {
      var kv = part.split("=");
      if (kv.length === 2 && kv[0] in state && /^\d+$/.test(kv[1])) { state[kv[0]] = parseInt(kv[1], 10); }
    });
  }
  el("rp-run").addEventListener("change", function (ev) { state.r = +ev.target.value; state.e = -1; state.p = -1; state.s = 0; render(); });
  el("rp-eval").addEventListener("change", function (ev) {
    var value = +ev.target.value;
    state.e = Math.floor(value / POLICIES.length); state.k = value % POLICIES.length; state.p = -1; state.s = 0; render();
  });
  el("rp-episode").addEventListener("change", function (ev) { state.p = +ev.target.value; state.s = 0; render(); });
  el("rp-step").addEventListener("input", function (ev) { state.s = +ev.target.value; render(); });
  el("rp-prev").addEventListener("click", function () { state.s -= 1; render(); });
  el("rp-next").addEventListener("click", function () { state.s += 1; render(); });
  el("rp-timeline").addEventListener("click", function (ev) {
    var target = ev.target.closest("button");
    if (target) { state.s = +target.getAttribute("data-step"); render(); }
  });
  document.addEventListener("keydown", function (ev) {
    if (ev.target.tagName === "INPUT" || ev.target.tagName === "SELECT") { return; }
    if (ev.key === "ArrowRight") { state.s += 1; render(); }
    if (ev.key === "ArrowLeft") { state.s -= 1; render(); }
  });
  readHash();
  render();
  document.body.setAttribute("data-replay-ready", "1");
  // Milliseconds from navigation start until the first replay step is drawn (benchmarks/report_size.py).
  document.body.setAttribute("data-ready-ms", String(Math.round(window.performance.now())));
}());

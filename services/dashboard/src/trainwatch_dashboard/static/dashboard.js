// Trainwatch dashboard: live updates over SSE and the admin forms. No framework, no CDN.
(function () {
  "use strict";

  const body = document.body;
  const messages = JSON.parse(body.dataset.messages || "{}");
  const msg = (key) => messages[key] || key;
  const PHASES = ["Pending", "Running", "Restarting", "Suspended", "Succeeded", "Failed", "Unknown"];

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value !== null && value !== undefined) node.setAttribute(key, value);
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function phaseClass(phase) {
    return PHASES.includes(phase) ? "phase-" + phase.toLowerCase() : "phase-unknown";
  }

  function badge(phase, subPhase) {
    const node = el("span", { class: "phase " + phaseClass(phase), "data-phase": phase }, msg("phase." + phase));
    if (subPhase) node.append(el("small", { "data-sub-phase": subPhase }, " · " + msg("subphase." + subPhase)));
    return node;
  }

  function formatTime(iso) {
    if (!iso) return "—";
    const d = new Date(iso);
    if (isNaN(d)) return iso;
    return d.toISOString().replace("T", " ").slice(0, 19);
  }

  // ---- times: the viewer's local time, UTC on hover ------------------------------------------
  // The server renders <time class="local-time" datetime="...Z">UTC</time>; this rewrites the text
  // in the browser's zone (Intl.DateTimeFormat), keeping the UTC time in the title.
  const localFormat = new Intl.DateTimeFormat(document.documentElement.lang || undefined, {
    year: "numeric", month: "2-digit", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23",
  });
  const localZone = localFormat.resolvedOptions().timeZone || "";

  function localize(node) {
    const d = new Date(node.getAttribute("datetime"));
    if (isNaN(d)) return;
    node.textContent = localFormat.format(d);
    node.title = formatTime(d.toISOString()) + " UTC";
    node.dataset.localized = "yes";
  }

  function timeTag(iso) {
    if (!iso) return document.createTextNode("—");
    const node = el("time", { class: "local-time", datetime: iso }, formatTime(iso) + " UTC");
    localize(node);
    return node;
  }

  function localizeTimes(root) {
    (root || document).querySelectorAll("time.local-time").forEach(localize);
    const note = document.getElementById("times-note");
    if (note && localZone) note.textContent = msg("jobs.times_local").replace("{zone}", localZone);
  }

  function flash(node) {
    node.classList.remove("flash");
    void node.offsetWidth; // restart the animation
    node.classList.add("flash");
  }

  // ---- live connection with a status light -----------------------------------------------
  function live(url, handlers, onReconnect) {
    const status = document.getElementById("live-status");
    let hadError = false;
    const source = new EventSource(url);
    source.onopen = () => {
      status.hidden = false;
      status.textContent = msg("live.connected");
      status.className = "live-status on";
      if (hadError && onReconnect) onReconnect();
      hadError = false;
    };
    source.onerror = () => {
      hadError = true;
      status.hidden = false;
      status.textContent = msg("live.reconnecting");
      status.className = "live-status off";
    };
    for (const [event, handler] of Object.entries(handlers)) {
      source.addEventListener(event, (e) => handler(JSON.parse(e.data)));
    }
    // Dropped for being slow: the server closed the stream; EventSource reconnects by itself.
    source.addEventListener("dropped", () => { hadError = true; });
    window.addEventListener("beforeunload", () => source.close());
    return source;
  }

  // Re-read the current page and swap one element: catches up on what a reconnect missed.
  async function refresh(selector) {
    const response = await fetch(window.location.href, { headers: { Accept: "text/html" } });
    if (!response.ok) return;
    const doc = new DOMParser().parseFromString(await response.text(), "text/html");
    const fresh = doc.querySelector(selector);
    const current = document.querySelector(selector);
    if (fresh && current) current.replaceWith(fresh);
  }

  // ---- jobs table -----------------------------------------------------------------------
  function jobsPage() {
    const table = document.getElementById("jobs-table");
    if (!table) return;
    const canInsert = table.dataset.insert === "yes";
    // The page never grows past its size: a new job beyond it is counted in the "N newer" marker
    // (which reloads the first page) instead of pushing rows down while someone reads them.
    const pageSize = Number(table.dataset.pageSize) || 50;
    const showDeleted = table.dataset.deleted === "include";
    const newer = new Set();
    const marker = document.getElementById("jobs-newer");
    const countNewer = (key) => {
      newer.add(key);
      if (!marker) return;
      marker.hidden = false;
      marker.querySelector("a").textContent = marker.dataset.template.replace("{count}", String(newer.size));
    };
    // The stream also carries the event that moves a shown job out of a filtered phase; a job not
    // shown yet is inserted only if it matches every filter of the page.
    const wanted = new URLSearchParams(window.location.search);
    // Each event carries the job's current diagnosis category (an update of the diagnosis alone
    // included), so a diagnosis filter is checked here like the others.
    const category = table.dataset.offFilter ? wanted.get("diagnosis") : null;
    const belongs = (job) =>
      job.change !== "deleted" &&
      (!wanted.get("namespace") || job.namespace === wanted.get("namespace")) &&
      (!wanted.get("phase") || job.phase === wanted.get("phase")) &&
      (!category || job.diagnosis_category === category) &&
      (wanted.get("terminal") !== "true" || job.terminal) &&
      (wanted.get("terminal") !== "false" || !job.terminal);
    live(table.dataset.live, {
      job: (job) => {
        const tbody = document.querySelector("#jobs-table tbody");
        const key = job.cluster_id + "/" + job.uid;
        let row = tbody.querySelector(`tr[data-key="${CSS.escape(key)}"]`);
        if (!row && !(canInsert && belongs(job))) return;
        if (!row && tbody.rows.length >= pageSize) {
          countNewer(key);
          return;
        }
        if (!row) {
          row = el("tr", { "data-key": key },
            el("td", null, el("a", { class: "job-link", href: `/jobs/${encodeURIComponent(job.cluster_id)}/${encodeURIComponent(job.uid)}` }, job.name)),
            el("td", null, job.cluster_id), el("td", null, job.namespace), el("td", null, job.kind_key),
            el("td", { class: "cell-phase" }), el("td", { class: "cell-replicas nowrap" }),
            el("td", { class: "cell-restarts" }), el("td", { class: "cell-reason" }),
            el("td", { class: "cell-failing nowrap" }), el("td", null, job.owner || ""),
            el("td", { class: "cell-age nowrap" }), el("td", { class: "cell-duration nowrap" }),
            el("td", { class: "cell-updated nowrap" }));
          tbody.prepend(row);
          const total = document.getElementById("jobs-total");
          if (total && total.dataset.total) {
            total.dataset.total = String(Number(total.dataset.total) + 1);
            total.textContent = total.dataset.template.replace("{total}", total.dataset.total);
          }
          const empty = document.getElementById("jobs-empty");
          if (empty) empty.remove();
        }
        if (job.change === "deleted" && !showDeleted) {
          row.remove();
          return;
        }
        row.querySelector(".cell-phase").replaceChildren(badge(job.phase, job.sub_phase));
        const progress = replicaProgress(job.replicas);
        if (progress) row.querySelector(".cell-replicas").textContent = progress;
        const restarts = row.querySelector(".cell-restarts");
        restarts.textContent = String(job.restart_count || 0);
        restarts.classList.toggle("bad", Boolean(job.restart_count));
        const reason = row.querySelector(".cell-reason");
        reason.textContent = job.reason || "";
        reason.title = job.message || "";
        const failing = row.querySelector(".cell-failing");
        if (job.phase === "Failed" || job.phase === "Restarting") {
          if (!failing.querySelector("time")) failing.replaceChildren(timeTag(job.observed_at));
        } else {
          failing.replaceChildren();
        }
        row.querySelector(".cell-updated").replaceChildren(timeTag(job.observed_at));
        row.classList.toggle("deleted", job.change === "deleted");
        if (category) {
          // Shown because it matched when the list was loaded; kept (no row jumps away while
          // someone reads it), marked, until the next load leaves it out.
          const off = job.diagnosis_category !== category;
          row.classList.toggle("off-filter", off);
          if (off) row.title = table.dataset.offFilter;
          else row.removeAttribute("title");
        }
        flash(row);
      },
    }, () => refresh("#jobs-table tbody").then(() => localizeTimes(table)));
    wireMyJobs();
  }

  // Mirrors presenters.replica_progress: ready (else active) of desired, over the roles.
  function replicaProgress(replicas) {
    const roles = Object.values(replicas || {});
    const desired = roles.filter((c) => Number.isInteger(c.desired));
    if (!desired.length) return "";
    const ready = roles.reduce((sum, c) => sum + (Number.isInteger(c.ready) ? c.ready : (c.active || 0)), 0);
    return ready + "/" + desired.reduce((sum, c) => sum + c.desired, 0);
  }

  // "My jobs": the filter is kept in this browser's localStorage (a query string), and the
  // "My jobs" button goes back to it. The URL itself stays the shareable form of any filter.
  const MY_JOBS = "trainwatch.myJobs";

  function currentFilter() {
    const params = new URLSearchParams(window.location.search);
    params.delete("cursor");
    params.delete("lang");
    return params.toString();
  }

  function wireMyJobs() {
    const save = document.getElementById("save-my-jobs");
    const mine = document.getElementById("my-jobs");
    if (!save || !mine) return;
    let stored = null;
    try { stored = window.localStorage.getItem(MY_JOBS); } catch (e) { return; }
    const show = (query) => {
      mine.hidden = query === null;
      if (query !== null) mine.href = "/jobs" + (query ? "?" + query : "");
    };
    show(stored);
    save.hidden = false;
    save.addEventListener("click", () => {
      const query = currentFilter();
      window.localStorage.setItem(MY_JOBS, query);
      show(query);
      save.textContent = msg("jobs.saved_mine");
    });
  }

  // ---- one job ----------------------------------------------------------------------------
  // The stream tells of an event before the persister has written it: fetch the page until it
  // shows that event (a few tries, backing off), then swap in the parts rendered from it.
  async function refreshWhenPersisted(sequence, selectors) {
    for (let attempt = 1; attempt <= 8; attempt++) {
      const response = await fetch(window.location.href, { headers: { Accept: "text/html" } });
      if (response.ok) {
        const doc = new DOMParser().parseFromString(await response.text(), "text/html");
        const slot = doc.querySelector("#diagnosis-slot");
        if (slot && Number(slot.dataset.sequence) >= sequence) {
          for (const selector of selectors) {
            const fresh = doc.querySelector(selector);
            const current = document.querySelector(selector);
            if (fresh && current) current.replaceWith(fresh);
          }
          return;
        }
      }
      await new Promise((resolve) => setTimeout(resolve, 250 * attempt));
    }
  }

  function jobPage() {
    const head = document.getElementById("job-head");
    if (!head) return;
    live(head.dataset.live, {
      job: (job) => {
        document.getElementById("job-phase").replaceChildren(badge(job.phase, job.sub_phase));
        const replicas = document.querySelector("#replicas tbody");
        if (replicas && job.replicas && Object.keys(job.replicas).length) {
          const dash = (value) => (value === null || value === undefined ? "—" : value);
          replicas.replaceChildren(...Object.entries(job.replicas).map(([role, c]) =>
            el("tr", null, el("td", null, role), el("td", null, dash(c.desired)), el("td", null, c.active || 0),
              el("td", null, dash(c.ready)), el("td", null, c.succeeded || 0),
              el("td", { class: c.failed ? "bad" : "" }, c.failed || 0))));
        }
        // A diagnosis update (or a transition carrying one) changes the "why" section.
        const slot = document.getElementById("diagnosis-slot");
        if (slot && job.change !== "deleted" && job.sequence > Number(slot.dataset.sequence)) {
          refreshWhenPersisted(job.sequence, ["#diagnosis-slot"]);
        }
        const timeline = document.getElementById("timeline");
        if (timeline.querySelector(`li[data-sequence="${job.sequence}"]`)) return;
        const what = el("div", { class: "what" }, badge(job.phase, job.sub_phase), " ");
        if (job.previous_phase) what.append(el("span", { class: "muted" }, "← " + msg("phase." + job.previous_phase)), " ");
        what.append(el("span", { class: "muted" }, msg("job.change." + job.change)), " ");
        if (job.reason) what.append(el("strong", { class: "reason" }, job.reason));
        const item = el("li", { class: phaseClass(job.phase), "data-sequence": job.sequence },
          el("div", { class: "when" }, timeTag(job.observed_at)), what);
        if (job.message) item.append(el("div", { class: "message" }, job.message));
        timeline.prepend(item);
        const empty = document.getElementById("timeline-empty");
        if (empty) empty.remove();
        flash(item);
      },
    }, () => refresh("#timeline"));
  }

  // ---- clusters -------------------------------------------------------------------------
  // Mirrors presenters.cluster_state: reachable with a kind forbidden is not healthy.
  function clusterState(h) {
    if (!h.reachable) return "unreachable";
    const states = Object.values(h.kinds || {}).map((k) => k.state);
    if (states.includes("forbidden")) return "forbidden";
    if (states.includes("failing")) return "failing";
    return "ok";
  }

  function kindTags(h) {
    if (!h.kinds) return (h.kinds_served || []).map((k) => el("span", { class: "tag" }, k));
    return Object.keys(h.kinds).sort()
      .filter((k) => h.kinds[k].state !== "not_installed")
      .map((k) => {
        const state = h.kinds[k].state;
        const label = state === "watching" ? k : k + " · " + msg("clusters.kind_state." + state);
        return el("span", { class: "tag kind-" + state }, label);
      });
  }

  // Mirrors presenters.watch_state: how far behind the watch is, as far as a report can say.
  const HEALTH_STALE_SECONDS = 90;
  function watchState(h) {
    const observed = new Date(h.observed_at);
    if (isNaN(observed) || (Date.now() - observed.getTime()) / 1000 > HEALTH_STALE_SECONDS) return "stale";
    if (!h.reachable) return "not_watching";
    const states = new Set(Object.values(h.kinds || {}).map((k) => k.state));
    states.delete("not_installed");
    if (states.has("failing") || states.has("forbidden")) return "not_watching";
    if (states.has("starting") || (!states.size && !h.informers_running)) return "catching_up";
    return "up_to_date";
  }

  function seconds(value) {
    return value < 10 ? value.toFixed(1) + "s" : Math.round(value) + "s";
  }

  function clustersPage() {
    const list = document.querySelector(".cluster-list");
    if (!list) return;
    live(list.dataset.live, {
      health: (h) => {
        const card = document.getElementById("cluster-" + h.cluster_id);
        if (!card) return;
        const field = (name) => card.querySelector(`[data-field="${name}"]`);
        const reachable = field("reachable");
        const state = clusterState(h);
        reachable.textContent = msg("clusters.state." + state);
        reachable.className = "health " + (state === "ok" ? "ok" : "bad");
        reachable.dataset.state = state;
        field("kinds").replaceChildren(...kindTags(h).flatMap((tag) => [tag, " "]));
        field("owner").textContent = h.owner || "—";
        const lag = field("lag");
        const ws = watchState(h);
        lag.dataset.state = ws;
        lag.className = "watch-" + ws;
        lag.replaceChildren(msg("clusters.watch." + ws));
        if (h.watch_lag_seconds != null) {
          lag.append(" ", el("small", { class: "muted", "data-field": "heard" },
            msg("clusters.watch.heard").replace("{ago}", seconds(h.watch_lag_seconds))));
        }
        field("error").textContent = h.last_error || "—";
        field("error").className = h.last_error ? "bad" : "";
      },
    });
  }

  // ---- admin forms ------------------------------------------------------------------------
  function formJson(form) {
    const data = {};
    for (const [key, value] of new FormData(form).entries()) {
      if (value instanceof File) continue;
      if (key === "kinds") (data.kinds = data.kinds || []).push(value);
      else data[key] = value;
    }
    return data;
  }

  function showResult(box, ok, lines, title) {
    box.hidden = false;
    box.className = "result " + (ok ? "alert alert-ok" : "alert alert-error");
    box.replaceChildren();
    if (title) box.append(el("strong", null, title));
    if (lines.length) box.append(el("ul", null, ...lines.map((line) => el("li", null, line))));
  }

  // The registry answers a dry-run with {cluster, connectivity} and a test with the connectivity report.
  function connectivityOf(result) {
    if (!result || typeof result !== "object") return {};
    return result.connectivity || result;
  }

  function describeTest(report) {
    const lines = [];
    if (report.server) lines.push(report.server);
    const version = report.server_version;
    if (version) lines.push(msg("form.server_version") + ": " + (version.git_version || JSON.stringify(version)));
    if (Array.isArray(report.kinds_served)) lines.push(msg("clusters.kinds") + ": " + (report.kinds_served.join(", ") || "—"));
    if (report.error) lines.push(report.error);
    return lines;
  }

  async function post(url, data) {
    const response = await fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify(data),
      credentials: "same-origin",
    });
    let answer;
    try { answer = await response.json(); } catch (e) { answer = { ok: false, problems: [response.statusText] }; }
    return answer;
  }

  function wireKubeconfig(form) {
    const text = form.querySelector("textarea[name=kubeconfig]");
    const file = form.querySelector(".kubeconfig-file");
    const select = form.querySelector(".context-select");
    if (!text || !select) return;
    let timer = null;
    const readContexts = async () => {
      if (!text.value.trim()) return;
      const answer = await post("/admin/kubeconfig/contexts", { kubeconfig: text.value });
      const previous = select.value;
      select.replaceChildren();
      if (!answer.ok) {
        select.append(el("option", { value: "" }, (answer.problems || []).join("; ")));
        return;
      }
      for (const name of answer.contexts) {
        const option = el("option", { value: name }, name);
        if (name === (previous || answer.current)) option.selected = true;
        select.append(option);
      }
    };
    text.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(readContexts, 300); });
    if (file) {
      file.addEventListener("change", async () => {
        if (!file.files.length) return;
        text.value = await file.files[0].text();
        file.value = "";
        readContexts();
      });
    }
  }

  // The registry refused the kubeconfig's API server (registered already, or not this cluster's):
  // show the reason and the checkbox that sends force=true with the next attempt.
  function refused(form, box, answer) {
    showResult(box, false, answer.problems || [], msg("form.refused"));
    const option = form.querySelector(".force-option");
    if (option && answer.overridable) option.hidden = false;
  }

  function wireAdminForm(form) {
    const box = form.querySelector(".result");
    wireKubeconfig(form);
    const testButton = form.querySelector(".js-test");
    if (testButton && form.dataset.test) {
      testButton.addEventListener("click", async () => {
        if (!form.reportValidity()) return;
        showResult(box, true, [], msg("form.testing"));
        const answer = await post(form.dataset.test, formJson(form));
        const report = connectivityOf(answer.result);
        if (answer.ok && report.ok !== false) showResult(box, true, describeTest(report), msg("form.test_ok"));
        else if (answer.ok) showResult(box, false, describeTest(report), msg("form.test_failed"));
        else refused(form, box, answer);
      });
    }
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      showResult(box, true, [], msg("form.saving"));
      const answer = await post(form.dataset.action, formJson(form));
      if (answer.ok && answer.result && answer.result.redirect) {
        window.location.assign(answer.result.redirect);
      } else if (answer.ok) {
        showResult(box, true, [], msg("form.test_ok"));
      } else {
        refused(form, box, answer);
      }
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    localizeTimes();
    jobsPage();
    jobPage();
    clustersPage();
    document.querySelectorAll("form.admin-form").forEach(wireAdminForm);
  });
})();

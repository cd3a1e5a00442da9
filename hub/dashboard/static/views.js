// The Magos Fleet dashboard's timeline of a Rollout, fleet page and plan diff. Loaded before
// app.js, whose helpers ($, el, showError, signedOut) it uses once the page runs. Everything is
// rendered with textContent: no text from the API is ever parsed as HTML.
"use strict";

// A second stream beside app.js's: the Rollout page follows its grid and its timeline at once.
let timelineSource = null;

// followTimeline follows the timeline of Rollout ns/name on the Rollout page; with no name it
// stops following.
function followTimeline(ns, name) {
  if (timelineSource) { timelineSource.close(); timelineSource = null; }
  if (!name) return;
  $("timeline-rows").replaceChildren();
  $("timeline-note").textContent = "";
  timelineSource = new EventSource("/api/v1/watch/namespaces/" + encodeURIComponent(ns) + "/rollouts/" + encodeURIComponent(name) + "/timeline");
  timelineSource.addEventListener("update", (ev) => renderTimeline(JSON.parse(ev.data)));
  timelineSource.addEventListener("error", (ev) => {
    if (ev.data) { $("timeline-note").textContent = JSON.parse(ev.data).error; timelineSource.close(); }
  });
}

// when shows an API time in the reader's time zone, to the second.
function when(t) {
  if (!t) return "";
  const d = new Date(t);
  return isNaN(d) ? String(t) : d.toLocaleString(undefined, { hour12: false });
}

// ago says how long ago an API time was, roughly.
function ago(t) {
  if (!t) return "never";
  const s = Math.max(0, Math.round((Date.now() - new Date(t)) / 1000));
  if (s < 90) return s + "s ago";
  if (s < 5400) return Math.round(s / 60) + "m ago";
  return Math.round(s / 3600) + "h ago";
}

// renderTimeline shows a Rollout's timeline, oldest first, as the API orders it.
function renderTimeline(tl) {
  $("timeline-note").textContent = tl.eventsUnavailable || "";
  $("timeline-empty").hidden = tl.entries.length > 0;
  $("timeline-rows").replaceChildren(...tl.entries.map((e, i) => {
    const plans = (e.plans || []).map((p) => el("li", { class: "plan", "data-digest": p.digest }, p.workspace + " " + p.digest));
    return el("tr", {
      class: "entry" + (e.warning ? " warning" : ""), "data-index": String(i), "data-type": e.type, "data-step": e.step || "",
      "data-who": e.who || "", "data-time": e.time, "data-source": e.source,
    },
    el("td", { class: "time", title: e.lastTime ? "last at " + when(e.lastTime) : "" }, when(e.time)),
    el("td", {}, el("span", { class: "entry-type" }, e.type), e.count > 1 ? el("span", { class: "count" }, " \u00d7" + e.count) : ""),
    el("td", {}, e.step || ""),
    el("td", { class: "who" }, e.who || ""),
    el("td", {}, e.message, ...(e.workspace ? [" ", el("span", { class: "rev" }, e.workspace)] : []),
      ...(plans.length ? [el("ul", { class: "plans" }, ...plans)] : [])));
  }));
}

// renderFleet shows every registered cluster: health, agent, heartbeat, sync watermark, and
// the Rollouts waiting on it.
function renderFleet(fl) {
  $("fleet-empty").hidden = fl.items.length > 0;
  $("fleet-rows").replaceChildren(...fl.items.map((c) => {
    const cond = (x) => x ? x.status + (x.reason ? " (" + x.reason + ")" : "") : "-";
    return el("tr", { "data-cluster": c.name, "data-health": c.health, "data-agent-version": c.agentVersion || "" },
      el("td", {}, c.name, el("span", { class: "state" }, c.transport)),
      el("td", {}, el("span", { class: "phase", "data-tone": c.health, title: (c.available && c.available.message) || "" }, c.health === "succeeded" ? "healthy" : c.health === "failed" ? "unhealthy" : "pending")),
      el("td", { class: "cond", "data-condition": "Available", title: (c.available && c.available.message) || "" }, cond(c.available)),
      el("td", { class: "cond", "data-condition": "Ready", title: (c.ready && c.ready.message) || "" }, cond(c.ready)),
      el("td", { class: "agent-version" }, c.agentVersion || "-"),
      el("td", { class: "heartbeat", title: when(c.lastHeartbeatTime) }, c.transport === "agent" ? ago(c.lastHeartbeatTime) : "-"),
      el("td", { class: "synced", title: c.clockOffset ? "agent clock offset " + c.clockOffset : "" }, c.syncedSince ? when(c.syncedSince) : "-"),
      el("td", {}, c.mirrored + "/" + c.workspaces),
      el("td", { class: "waiting", "data-waiting": String(c.waiting.length) }, ...c.waiting.map((w) => el("a", {
        href: "#/namespaces/" + encodeURIComponent(w.namespace) + "/rollouts/" + encodeURIComponent(w.name),
        title: w.message || "", "data-rollout": w.namespace + "/" + w.name,
      }, w.namespace + "/" + w.name + (w.step ? " (" + w.step + ")" : "")))));
  }));
}

// planLineKind is what one line of tofu's plan text does: create, destroy, update, replace, or
// plain (headers, attributes left alone, summaries).
function planLineKind(line) {
  const t = line.trimStart();
  if (t.startsWith("-/+") || t.startsWith("+/-")) return "replace";
  if (t.startsWith("+")) return "create";
  if (t.startsWith("-")) return "destroy";
  if (t.startsWith("~")) return "update";
  if (t.startsWith("<=")) return "read";
  return "plain";
}

// renderPlan fills pre with the plan text, a span per line classed by what the line does; a
// note (such as "(cut at its size limit)") follows as plain text.
function renderPlan(pre, text, note) {
  pre.replaceChildren();
  const lines = text.split("\n");
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  for (const line of lines) {
    const kind = planLineKind(line);
    pre.append(el("span", { class: "diff diff-" + kind, "data-diff": kind }, line), "\n");
  }
  if (note) pre.append(note);
}

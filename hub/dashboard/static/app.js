// The Magos Fleet dashboard: a list of Rollouts and, for one Rollout, a grid of its steps by
// clusters that follows the hub's server-sent events. Everything is rendered with textContent:
// no text from the API is ever parsed as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
let source = null;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else if (k === "onclick") e.addEventListener("click", v);
    else e[k] = v;
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c ?? "")));
  return e;
}

function show(section) {
  for (const id of ["login", "rollouts", "rollout", "fleet"]) $(id).hidden = id !== section;
}

function showError(msg) {
  $("error").textContent = msg || "";
  $("error").hidden = !msg;
}

async function getJSON(path) {
  const res = await fetch(path, { credentials: "same-origin" });
  const body = await res.json().catch(() => ({ error: res.statusText }));
  if (res.status === 401) { signedOut(); throw new Error(body.error); }
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

// loadAuthMethods offers the sign-in with an OIDC provider when the hub has one configured.
async function loadAuthMethods() {
  const res = await fetch("/api/v1/auth-methods", { credentials: "same-origin" }).catch(() => null);
  const m = res && res.ok ? await res.json().catch(() => ({})) : {};
  if (!m.oidc) return;
  $("oidc-name").textContent = m.oidc.name;
  $("oidc-login").href = m.oidc.loginURL;
  $("oidc").hidden = false;
}

function signedOut() {
  if (source) { source.close(); source = null; }
  loadAuthMethods();
  followTimeline();
  $("whoami").textContent = "";
  $("logout").hidden = true;
  show("login");
}

// follow opens a server-sent events stream and renders each update with render.
function follow(path, render) {
  if (source) source.close();
  source = new EventSource(path);
  source.addEventListener("update", (ev) => {
    showError("");
    $("live").textContent = "live: updated " + new Date().toLocaleTimeString();
    render(JSON.parse(ev.data));
  });
  source.addEventListener("error", (ev) => {
    if (ev.data) { showError(JSON.parse(ev.data).error); source.close(); return; }
    // Refused on reconnecting: signed out elsewhere, or the session ended. whoami says which
    // (a 401 shows the sign-in).
    if (source && source.readyState === EventSource.CLOSED) {
      getJSON("/api/v1/whoami").then(() => showError("the live view was refused: reload the page")).catch(() => {});
      return;
    }
    $("live").textContent = "live: reconnecting...";
  });
}

function short(sha) { return sha ? sha.slice(0, 12) : "-"; }

function renderRollouts(list) {
  const rows = $("rollout-rows");
  rows.replaceChildren();
  for (const r of list.items) {
    const href = "#/namespaces/" + encodeURIComponent(r.namespace) + "/rollouts/" + encodeURIComponent(r.name);
    rows.append(el("tr", { "data-rollout": r.namespace + "/" + r.name },
      el("td", {}, r.namespace),
      el("td", {}, el("a", { href }, r.name)),
      el("td", {}, el("span", { class: "phase", "data-phase": r.phase, "data-tone": r.tone }, r.phase + (r.paused ? " (paused)" : ""))),
      el("td", {}, r.currentStep || "-"),
      el("td", {}, r.applied + "/" + r.total),
      el("td", {}, r.message || "")));
  }
  $("rollouts-empty").hidden = list.items.length > 0;
}

let selected = null; // the Workspace whose runs are shown: {cluster, namespace, name}

function renderGrid(g) {
  $("rollout-title").textContent = "Rollout " + g.namespace + "/" + g.name;
  $("rollout-phase").textContent = g.phase + (g.reason ? " (" + g.reason + ")" : "");
  $("rollout-phase").setAttribute("data-phase", g.phase);
  $("rollout-phase").setAttribute("data-tone", g.tone);
  $("rollout-summary").textContent = g.applied + "/" + g.total + " Workspaces applied" +
    (g.currentStep ? ", step " + g.currentStep : "") + (g.paused ? ", paused" : "") +
    (g.stale ? " (the hub has not caught up with the latest spec yet)" : "");
  $("rollout-message").textContent = [g.message, g.halted].filter(Boolean).join(" — ");
  $("rollout-revisions").replaceChildren(...(g.revisions || []).map((r) =>
    el("li", {}, "rolling out commit " + short(r.commit) + " of " + r.repoURL + " (" + r.targetRevision + ")")));

  $("grid-head").replaceChildren(el("th", {}, "Step"), ...g.clusters.map((c) => el("th", { "data-cluster": c }, c)));
  const rows = $("grid-rows");
  rows.replaceChildren();
  for (const s of g.steps) {
    const drifted = (s.status && s.status.drifted) || [];
    const tr = el("tr", { "data-step": s.name },
      el("td", { class: "step" }, s.name, el("span", { class: "state", "data-step-phase": s.phase || "" },
        s.invalidSelector ? "InvalidSelector" : s.state),
        ...(drifted.length ? [el("span", { class: "drifted", "data-drifted": drifted.length }, "drifted: " + drifted.join(", "))] : [])));
    for (const c of g.clusters) {
      const td = el("td", { "data-step": s.name, "data-cluster": c });
      for (const w of s.workspaces.filter((w) => w.cluster === c)) {
        const isSel = selected && selected.cluster === w.cluster && selected.namespace === w.namespace && selected.name === w.name;
        td.append(el("span", {
          class: "ws phase" + (isSel ? " selected" : ""), "data-phase": w.phase || "", "data-tone": w.tone, "data-workspace": w.namespace + "/" + w.name,
          title: w.message || "", onclick: () => selectWorkspace(w),
        }, w.namespace + "/" + w.name + " ", el("b", {}, (w.phase || "-") + (w.late ? " (late)" : "")), " ", el("span", { class: "rev" }, short(w.revision)),
        ...(w.preview ? [" ", previewBadge(w.preview)] : []),
        ...(w.drift ? [" ", driftBadge(w)] : [])));
      }
      tr.append(td);
    }
    rows.append(tr);
  }
  if (selected) loadRuns(selected);
  renderActions(g); // actions.js
}

// previewBadge shows a Workspace's plan of the change in a Rollout with planFirst: what it
// adds, changes and destroys (and how many of those revert drift), or why it has no plan, and the
// plan previewed when it changed.
function previewBadge(p) {
  let text = p.result;
  if (p.result === "Planned" || p.result === "Applied") {
    text = "+" + (p.add || 0) + " ~" + (p.change || 0) + " -" + (p.destroy || 0);
    if (p.driftReverted) text += ", " + p.driftReverted + " revert drift";
  }
  if (p.previewed) {
    text += " (previewed +" + (p.previewed.add || 0) + " ~" + (p.previewed.change || 0) + " -" + (p.previewed.destroy || 0) + ")";
  }
  return el("span", { class: "preview", "data-preview": p.result, title: p.digest ? "plan " + p.digest : "" }, text);
}

// driftBadge shows the result of a Workspace's last drift check (status.drift.result), marked
// when it drifted at the commit it applied (a check of an older commit says nothing of it).
function driftBadge(w) {
  const title = w.drifted ? "drifted from the commit it applied" : (w.drift === "Drifted" ? "drift found at an older commit" : "last drift check");
  return el("span", { class: "drift", "data-drift": w.drift, "data-drifted": w.drifted ? "true" : "false", title: title }, "drift: " + w.drift);
}

function selectWorkspace(w) {
  selected = { cluster: w.cluster, namespace: w.namespace, name: w.name };
  $("output").hidden = true;
  for (const e of document.querySelectorAll(".ws.selected")) e.classList.remove("selected");
  loadRuns(selected);
}

async function loadRuns(w) {
  const path = "/api/v1/clusters/" + encodeURIComponent(w.cluster) + "/namespaces/" + encodeURIComponent(w.namespace) +
    "/workspaces/" + encodeURIComponent(w.name) + "/runs";
  let body;
  try { body = await getJSON(path); } catch (e) { showError(e.message); return; }
  $("runs").hidden = false;
  renderRetry(w, body.runs); // actions.js
  $("runs-title").textContent = "Runs of " + w.namespace + "/" + w.name + " in " + w.cluster;
  $("runs-hint").textContent = "Plan text and logs come from the copies the agent of " + w.cluster +
    " keeps on the hub: reading them takes get on Secrets in namespace magos-cluster-" + w.cluster +
    " (magosctl plan " + w.name + " -n " + w.namespace + " --cluster " + w.cluster + " --run RUN shows them too).";
  $("run-rows").replaceChildren(...body.runs.map((r) => el("tr", { "data-run": r.runID },
    el("td", {}, r.runID),
    el("td", {}, r.trigger || ""),
    el("td", {}, short(r.revision)),
    el("td", {}, el("span", { class: "phase", "data-phase": r.phase || "", "data-tone": r.tone }, r.phase + (r.reason ? " (" + r.reason + ")" : ""))),
    el("td", {}, r.startedAt || ""),
    el("td", {}, r.finishedAt || ""),
    el("td", {}, r.resourceChanges ? "+" + r.resourceChanges.add + " ~" + r.resourceChanges.change + " -" + r.resourceChanges.destroy : ""),
    el("td", {}, r.policy || ""),
    el("td", {}, ...(r.operations || []).map((o) => o.outputSecret
      ? el("button", { class: "output", "data-output": r.runID + "/" + o.operation, onclick: () => loadOutput(w, r.runID, o.operation) },
        o.operation + ": " + o.outcome)
      : el("span", { class: "output" }, o.operation + ": " + o.outcome))))));
}

// loadOutput shows the plan text and log of one operation of a run, one click from its row.
async function loadOutput(w, runID, operation) {
  const path = "/api/v1/clusters/" + encodeURIComponent(w.cluster) + "/namespaces/" + encodeURIComponent(w.namespace) +
    "/workspaces/" + encodeURIComponent(w.name) + "/runs/" + encodeURIComponent(runID) + "/" + encodeURIComponent(operation);
  $("output").hidden = false;
  $("output-title").textContent = "The " + operation + " of run " + runID;
  $("output-plan").textContent = "";
  $("output-log").textContent = "";
  let body;
  try { body = await getJSON(path); } catch (e) { $("output-plan").textContent = e.message; return; }
  if (body.planText) renderPlan($("output-plan"), body.planText, body.planTruncated ? "(cut at its size limit)" : "");
  else $("output-plan").textContent = "(no plan text: the " + operation + " printed none)";
  $("output-log").textContent = (body.logTruncated ? "(only the end of " + body.outputBytes + " bytes)\n" : "") + body.log;
}

async function route() {
  showError("");
  let me;
  try { me = await getJSON("/api/v1/whoami"); } catch (e) { return; }
  $("whoami").textContent = me.user;
  $("logout").hidden = false;
  const m = location.hash.match(/^#\/namespaces\/([^/]+)\/rollouts\/([^/]+)$/);
  if (m) {
    const [ns, name] = [decodeURIComponent(m[1]), decodeURIComponent(m[2])];
    selected = null;
    $("runs").hidden = true;
    $("output").hidden = true;
    show("rollout");
    loadPermissions(ns, name); // actions.js
    follow("/api/v1/watch/namespaces/" + encodeURIComponent(ns) + "/rollouts/" + encodeURIComponent(name), renderGrid);
    followTimeline(ns, name);
  } else if (location.hash === "#/fleet") {
    followTimeline();
    show("fleet");
    follow("/api/v1/watch/fleet", renderFleet);
  } else {
    followTimeline();
    show("rollouts");
    follow("/api/v1/watch/rollouts", renderRollouts);
  }
}

$("login-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const res = await fetch("/login", { method: "POST", body: new URLSearchParams({ token: $("token").value.trim() }) });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) { $("login-error").textContent = body.error || res.statusText; return; }
  $("token").value = "";
  $("login-error").textContent = "";
  route();
});
$("logout").addEventListener("click", async () => { await fetch("/logout", { method: "POST" }); signedOut(); });
window.addEventListener("hashchange", route);
route();

// The dashboard's actions on a Rollout: pause and resume it, approve or reject the plans a step
// waits with, and ask a Workspace for a retry. Each is a JSON POST that the hub makes with the
// signed-in person's own token; the page offers only what GET .../permissions says they may do
// (SelfSubjectAccessReview), and shows the API server's answer when it refuses.
"use strict";

let perms = null;      // Permissions of the Rollout shown, once known
let shown = null;      // the grid last rendered
let permsFor = "";     // "namespace/name" perms were asked for

async function loadPermissions(ns, name) {
  perms = null;
  shown = null;
  permsFor = ns + "/" + name;
  $("action-result").textContent = "";
  $("action-result").removeAttribute("data-outcome");
  const asked = permsFor;
  try {
    const p = await getJSON(rolloutPath(ns, name) + "/permissions");
    if (asked !== permsFor) return;
    perms = p;
  } catch (e) {
    perms = { approve: false, pause: false, retry: {} };
  }
  if (shown) renderActions(shown);
}

function rolloutPath(ns, name) {
  return "/api/v1/namespaces/" + encodeURIComponent(ns) + "/rollouts/" + encodeURIComponent(name);
}

// act POSTs an action and shows its outcome: what was done, or why it was refused.
async function act(path, body) {
  const result = $("action-result");
  result.textContent = "…";
  result.removeAttribute("data-outcome");
  const res = await fetch(path, {
    method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json" }, body: JSON.stringify(body || {}),
  });
  const answer = await res.json().catch(() => ({ error: res.statusText }));
  if (res.status === 401) { signedOut(); return false; }
  result.textContent = res.ok ? answer.message : "refused: " + (answer.error || res.statusText);
  result.setAttribute("data-outcome", res.ok ? "done" : "refused");
  return res.ok;
}

// renderActions shows the Rollout's controls for the grid g: pause or resume, and the plans of
// the step awaiting approval with approve and reject, when the person may use them.
function renderActions(g) {
  shown = g;
  const p = perms || { approve: false, pause: false, retry: {} };
  $("pause").hidden = !p.pause || g.paused;
  $("resume").hidden = !p.pause || !g.paused;
  $("pause").onclick = () => act(rolloutPath(g.namespace, g.name) + "/pause");
  $("resume").onclick = () => act(rolloutPath(g.namespace, g.name) + "/resume");

  const step = g.steps.find((s) => s.status && s.status.phase === "AwaitingApproval" && (s.status.plans || []).length > 0);
  $("approval").hidden = !step;
  if (!step) return;
  const st = step.status;
  $("approval").setAttribute("data-step", step.name);
  $("approval-title").textContent = "Step " + step.name + " awaits approval of " + st.plans.length + " plan(s)";
  $("approval-plans").replaceChildren(...st.plans.map((pl) => el("tr", { "data-plan": pl.workspace },
    el("td", {}, pl.workspace),
    el("td", {}, short(pl.revision)),
    el("td", { class: "digest" }, pl.digest),
    el("td", {}, el("span", { class: "add" }, "+" + (pl.add || 0)), " ",
      el("span", { class: "change" }, "~" + (pl.change || 0)), " ",
      el("span", { class: "destroy" }, "-" + (pl.destroy || 0))))));
  const rej = st.rejection;
  $("approval-rejection").hidden = !rej;
  $("approval-rejection").textContent = rej
    ? "Rejected by " + rej.rejectedBy + " at " + rej.rejectedAt + ": " + rej.reason : "";
  $("approval-controls").hidden = !p.approve;
  $("approval-denied").hidden = !perms || p.approve;
  $("approval-denied").textContent = "You may not approve or reject these plans: that takes the verbs update and approve on the Rollout.";
  $("approve").onclick = () => act(rolloutPath(g.namespace, g.name) + "/approve", { step: step.name });
  $("reject").onclick = () => {
    const reason = $("reject-reason").value.trim();
    if (!reason) {
      $("action-result").textContent = "say why you reject the plans";
      $("action-result").setAttribute("data-outcome", "refused");
      return;
    }
    act(rolloutPath(g.namespace, g.name) + "/reject", { step: step.name, reason }).then((ok) => {
      if (ok) $("reject-reason").value = "";
    });
  };
}

// renderRetry offers a retry of the selected Workspace's current run when the person may ask
// for one in its cluster (asked of the hub once per cluster); the hub refuses it while the run
// is under way.
async function renderRetry(w, runs) {
  const b = $("retry");
  b.setAttribute("data-workspace", w.cluster + "/" + w.namespace + "/" + w.name);
  b.onclick = () => act("/api/v1/clusters/" + encodeURIComponent(w.cluster) + "/namespaces/" + encodeURIComponent(w.namespace) +
    "/workspaces/" + encodeURIComponent(w.name) + "/retry");
  if (!perms || runs.length === 0) { b.hidden = true; return; }
  if (!(w.cluster in perms.retry)) {
    const asked = permsFor;
    try {
      const p = await getJSON(rolloutPath(...asked.split("/")) + "/permissions?cluster=" + encodeURIComponent(w.cluster));
      if (asked !== permsFor || !perms) return;
      perms.retry[w.cluster] = !!p.retry[w.cluster];
    } catch (e) {
      return;
    }
  }
  b.hidden = !perms.retry[w.cluster];
}

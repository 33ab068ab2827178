// Tenants, namespaces and a namespace's policies, with create / delete / set-policy actions.
import { del, enc, get, post, put } from "./api.js";
import { ask, denied, h, notice, showError, table, fill } from "./ui.js";

// Namespace policies the console can set: the admin REST path, its method and an example value.
export const POLICIES = [
  ["messageTTL", "POST", "3600", "seconds"],
  ["retention", "POST", '{"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}', ""],
  ["backlogQuota", "POST", '{"limitSize": 1073741824, "policy": "producer_request_hold"}', ""],
  ["deduplication", "POST", "true", ""],
  ["maxProducersPerTopic", "POST", "10", ""],
  ["maxConsumersPerTopic", "POST", "10", ""],
  ["maxConsumersPerSubscription", "POST", "10", ""],
  ["maxUnackedMessagesPerConsumer", "POST", "1000", ""],
  ["maxSubscriptionsPerTopic", "POST", "10", ""],
  ["maxTopicsPerNamespace", "POST", "1000", ""],
  ["subscriptionExpirationTime", "POST", "1440", "minutes"],
  ["inactiveTopicPolicies", "POST", '{"inactiveTopicDeleteMode": "delete_when_no_subscriptions", "maxInactiveDurationSeconds": 600, "deleteWhileInactive": true}', ""],
  ["autoTopicCreation", "POST", '{"allowAutoTopicCreation": true, "topicType": "non-partitioned"}', ""],
  ["schemaCompatibilityStrategy", "PUT", '"FULL"', ""],
];

export async function listTenants() {
  return get("/admin/v2/tenants");
}

export async function tenantsPage(main) {
  let tenants;
  try { tenants = await listTenants(); } catch (error) {
    if (error.signIn) throw error;
    fill(main, h("h1", {}, "Tenants"), denied(error));
    return;
  }
  const rows = await Promise.all(tenants.map(async (t) => {
    const [info, namespaces] = await Promise.all([
      get(`/admin/v2/tenants/${enc(t)}`).catch(() => null),
      get(`/admin/v2/namespaces/${enc(t)}`).catch(() => null)]);
    return [h("a", { href: `#/namespaces/${enc(t)}` }, t),
      info ? (info.adminRoles || []).join(", ") || "-" : "?",
      info ? (info.allowedClusters || []).join(", ") : "?",
      namespaces ? namespaces.length : "?"];
  }));
  fill(main, h("h1", {}, "Tenants"),
    table(["Tenant", "Admin roles", "Allowed clusters", "#Namespaces"], rows, { id: "tenants" }));
}

export async function namespacesPage(main, [tenant], ctx) {
  let tenants = tenant ? [tenant] : null;
  let error = null;
  if (!tenants) {
    try { tenants = await listTenants(); } catch (e) {
      if (e.signIn) throw e;
      error = e;
      tenants = [];
    }
  }
  const rows = [];
  const problems = [];
  for (const t of tenants) {
    try {
      for (const ns of await get(`/admin/v2/namespaces/${enc(t)}`)) {
        const [, local] = ns.split("/");
        rows.push([h("a", { href: `#/namespace/${enc(t)}/${enc(local)}` }, ns),
          h("a", { href: `#/topics/${enc(t)}/${enc(local)}` }, "topics"),
          h("button", { class: "small danger", onclick: () => deleteNamespace(ns, () => route(ctx)) }, "Delete")]);
      }
    } catch (e) {
      if (e.signIn) throw e;
      problems.push(h("p", {}, `${t}: `, denied(e)));
    }
  }
  const tenantInput = h("input", { id: "new-ns-tenant", placeholder: "tenant", value: tenant || (tenants[0] ?? "public") });
  const nameInput = h("input", { id: "new-ns-name", placeholder: "namespace name" });
  const create = async () => {
    const ns = `${tenantInput.value.trim()}/${nameInput.value.trim()}`;
    try {
      await put(`/admin/v2/namespaces/${enc(tenantInput.value.trim())}/${enc(nameInput.value.trim())}`);
      notice(`Namespace ${ns} created`);
      route(ctx);
    } catch (e) { showError(e, `Create ${ns}`); }
  };
  fill(main, h("h1", {}, tenant ? `Namespaces of ${tenant}` : "Namespaces"),
    error ? denied(error) : null,
    h("div", { class: "toolbar" }, "New namespace:", tenantInput, "/", nameInput,
      h("button", { class: "primary", id: "create-namespace", onclick: create }, "Create")),
    table(["Namespace", "", ""], rows, { id: "namespaces", empty: "No namespaces." }), problems);
}

function route(ctx) { if (ctx.alive()) window.dispatchEvent(new HashChangeEvent("hashchange")); }

async function deleteNamespace(ns, done) {
  const force = await ask({ title: `Delete namespace ${ns}?`, text: "Its policies go with it. Type 'force' to delete its topics too (otherwise a namespace with topics is refused).", label: "force?", value: "", okText: "Delete", danger: true });
  if (force === null) return;
  const [t, local] = ns.split("/");
  try {
    await del(`/admin/v2/namespaces/${enc(t)}/${enc(local)}${force.trim() === "force" ? "?force=true" : ""}`);
    notice(`Namespace ${ns} deleted`);
    done();
  } catch (e) { showError(e, `Delete ${ns}`); }
}

export async function namespacePage(main, [tenant, local], ctx) {
  const ns = `${tenant}/${local}`;
  const base = `/admin/v2/namespaces/${enc(tenant)}/${enc(local)}`;
  let policies;
  try { policies = await get(base); } catch (error) {
    if (error.signIn) throw error;
    fill(main, h("h1", {}, `Namespace ${ns}`), denied(error));
    return;
  }
  const shown = Object.entries(policies).filter(([, v]) => v !== null && v !== false && v !== 0 &&
    !(typeof v === "object" && Object.keys(v).length === 0) && !(Array.isArray(v) && v.length === 0));
  const select = h("select", { id: "policy-name" }, POLICIES.map(([name]) => h("option", { value: name }, name)));
  const value = h("input", { id: "policy-value", size: 60, value: POLICIES[0][2] });
  select.addEventListener("change", () => { value.value = POLICIES.find((p) => p[0] === select.value)[2]; });
  const setPolicy = async () => {
    const [name, method] = POLICIES.find((p) => p[0] === select.value);
    let body;
    try { body = JSON.parse(value.value); } catch { notice(`The value must be JSON: ${value.value}`, true); return; }
    try {
      await (method === "PUT" ? put : post)(`${base}/${name}`, body);
      notice(`${name} set on ${ns}`);
      route(ctx);
    } catch (e) { showError(e, `Set ${name}`); }
  };
  const removePolicy = async () => {
    const name = select.value;
    if (!(await ask({ title: `Remove ${name} from ${ns}?`, text: "The broker's default applies again.", okText: "Remove", danger: true }))) return;
    try { await del(`${base}/${name}`); notice(`${name} removed from ${ns}`); route(ctx); } catch (e) { showError(e, `Remove ${name}`); }
  };
  const clearBacklog = async () => {
    if (!(await ask({ title: `Clear the backlog of every subscription in ${ns}?`, text: "Every unacknowledged message of every subscription is skipped.", okText: "Clear backlog", danger: true }))) return;
    try { await post(`${base}/clearBacklog`); notice(`Backlog of ${ns} cleared`); } catch (e) { showError(e, "Clear backlog"); }
  };
  const unload = async () => {
    if (!(await ask({ title: `Unload every topic of ${ns}?`, text: "Clients reconnect.", okText: "Unload" }))) return;
    try { await put(`${base}/unload`); notice(`${ns} unloaded`); } catch (e) { showError(e, "Unload"); }
  };
  fill(main, 
    h("h1", {}, `Namespace ${ns}`),
    h("div", { class: "toolbar" },
      h("a", { href: `#/topics/${enc(tenant)}/${enc(local)}` }, "Topics →"), h("span", { class: "grow" }),
      h("button", { onclick: unload }, "Unload"),
      h("button", { class: "danger", onclick: clearBacklog }, "Clear backlog"),
      h("button", { class: "danger", onclick: () => deleteNamespace(ns, () => ctx.go("#/namespaces")) }, "Delete namespace")),
    h("h2", {}, "Policies"),
    table(["Policy", "Value"], shown.map(([k, v]) => [k, h("code", {}, JSON.stringify(v))]), { id: "policies", empty: "All policies at the broker's defaults." }),
    h("h2", {}, "Set a policy"),
    h("div", { class: "toolbar" }, select, value,
      h("button", { class: "primary", id: "set-policy", onclick: setPolicy }, "Set"),
      h("button", { class: "danger", onclick: removePolicy }, "Remove")),
    h("details", {}, h("summary", {}, "Policies document (JSON)"), h("pre", {}, JSON.stringify(policies, null, 2))));
}

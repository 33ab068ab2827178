// A namespace's topics: server-side search and paging (topicsPage), create and delete.
import { del, enc, get, put } from "./api.js";
import { formatNumber } from "./chart.js";
import { ask, bytes, denied, h, notice, showError, table, fill } from "./ui.js";

const PAGE = 50;

export function topicHref(fullName) {
  const [domain, rest] = fullName.split("://");
  const [tenant, ns, ...local] = rest.split("/");
  return `#/topic/${domain}/${enc(tenant)}/${enc(ns)}/${enc(local.join("/"))}`;
}

export function topicPath(fullName) {
  const [domain, rest] = fullName.split("://");
  const [tenant, ns, ...local] = rest.split("/");
  return `/admin/v2/${domain}/${enc(tenant)}/${enc(ns)}/${enc(local.join("/"))}`;
}

async function allNamespaces() {
  const tenants = await get("/admin/v2/tenants");
  const lists = await Promise.all(tenants.map((t) => get(`/admin/v2/namespaces/${enc(t)}`).catch(() => [])));
  return lists.flat().sort();
}

export async function topicsPage(main, [tenant, local], ctx) {
  let namespaces = [];
  try { namespaces = await allNamespaces(); } catch (error) {
    if (error.signIn) throw error; // else: this role lists no tenants; type the namespace
  }
  const ns = tenant ? `${tenant}/${local}` : namespaces.includes("public/default") ? "public/default" : namespaces[0];
  const picker = namespaces.length
    ? h("select", { id: "topics-namespace" }, namespaces.map((n) => h("option", { value: n, selected: n === ns }, n)))
    : h("input", { id: "topics-namespace", placeholder: "tenant/namespace", value: ns || "" });
  picker.addEventListener("change", () => {
    const [t, n] = picker.value.split("/");
    if (t && n) ctx.go(`#/topics/${enc(t)}/${enc(n)}`);
  });
  const search = h("input", { id: "topic-search", type: "search", placeholder: "search by name", size: 30 });
  const kind = h("select", { id: "topic-kind" }, ["all", "persistent", "non-persistent", "partitioned"].map((k) => h("option", { value: k }, k)));
  const list = h("div", { id: "topic-list" });
  const pager = h("div", { class: "pager" });
  const newName = h("input", { id: "new-topic-name", placeholder: "topic name" });
  const newKind = h("select", { id: "new-topic-kind" }, h("option", { value: "persistent" }, "persistent"), h("option", { value: "non-persistent" }, "non-persistent"));
  const newPartitions = h("input", { id: "new-topic-partitions", type: "number", min: 0, value: 0, size: 4 });
  fill(main, h("h1", {}, "Topics"),
    h("div", { class: "toolbar" }, "Namespace", picker,
      ns ? h("a", { href: `#/namespace/${ns.split("/").map(enc).join("/")}` }, "policies") : null,
      h("span", { class: "grow" }), search, kind),
    pager, list,
    h("h2", {}, "New topic"),
    h("div", { class: "toolbar" }, newName, newKind, "partitions", newPartitions,
      h("button", { class: "primary", id: "create-topic", onclick: () => createTopic() }, "Create")));
  if (!ns) { list.replaceChildren(h("p", { class: "muted" }, "Pick a namespace.")); return; }
  const [t, n] = ns.split("/");
  let offset = 0;

  const load = async () => {
    const q = new URLSearchParams({ search: search.value, kind: kind.value, offset, limit: PAGE });
    let page;
    try { page = await get(`/admin/v2/namespaces/${enc(t)}/${enc(n)}/topicsPage?${q}`); } catch (error) {
      if (error.signIn) throw error;
      list.replaceChildren(denied(error));
      pager.replaceChildren();
      return;
    }
    if (!ctx.alive()) return;
    list.dataset.total = page.total;
    const rows = page.topics.map((x) => [
      h("a", { href: topicHref(x.name), "data-testid": "topic-link" }, x.localName),
      h("span", { class: `tag ${x.domain === "non-persistent" ? "np" : ""} ${x.partitions ? "part" : ""}` },
        x.partitions ? `${x.domain}, ${x.partitions} partitions` : x.domain),
      x.producers, x.subscriptions, x.consumers, formatNumber(x.msgBacklog),
      formatNumber(x.msgRateIn), formatNumber(x.msgRateOut), bytes(x.storageSize),
      h("button", { class: "small danger", onclick: () => deleteTopic(x) }, "Delete")]);
    list.replaceChildren(table(["Topic", "Kind", "#Producers", "#Subscriptions", "#Consumers", "#Backlog", "#Msg/s in", "#Msg/s out", "#Storage", ""],
      rows, { id: "topics", empty: search.value ? "No topic matches." : "No topics." }));
    const last = Math.min(page.total, offset + PAGE);
    pager.replaceChildren(
      h("button", { class: "small", id: "page-prev", disabled: offset === 0, onclick: () => { offset = Math.max(0, offset - PAGE); load(); } }, "‹ Previous"),
      h("span", { "data-testid": "page-info" }, page.total ? `${offset + 1}-${last} of ${page.total}` : "0 topics"),
      h("button", { class: "small", id: "page-next", disabled: last >= page.total, onclick: () => { offset += PAGE; load(); } }, "Next ›"));
  };
  let debounce = 0;
  search.addEventListener("input", () => { clearTimeout(debounce); debounce = setTimeout(() => { offset = 0; load(); }, 250); });
  kind.addEventListener("change", () => { offset = 0; load(); });

  const deleteTopic = async (x) => {
    const what = x.partitions ? `partitioned topic ${x.name} (${x.partitions} partitions)` : `topic ${x.name}`;
    if (!(await ask({ title: `Delete ${what}?`, text: "Its messages and subscriptions are deleted. Connected clients are disconnected (force).", okText: "Delete", danger: true }))) return;
    try {
      await del(`${topicPath(x.name)}${x.partitions ? "/partitions" : ""}?force=true`);
      notice(`Deleted ${x.name}`);
      load();
    } catch (e) { showError(e, `Delete ${x.name}`); }
  };
  const createTopic = async () => {
    const name = `${newKind.value}://${t}/${n}/${newName.value.trim()}`;
    const partitions = Number(newPartitions.value || 0);
    try {
      if (partitions > 0) await put(`${topicPath(name)}/partitions`, partitions);
      else await put(topicPath(name));
      notice(`Created ${name}`);
      newName.value = "";
      load();
    } catch (e) { showError(e, `Create ${name}`); }
  };
  await load();
  ctx.every(5000, load);
}

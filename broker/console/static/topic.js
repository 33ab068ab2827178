// One topic: producers, subscriptions (backlog and rates, live chart), consumers (permits,
// unacked), internal stats (ledgers, cursors), replication; peek and the operator's actions.
import { call, del, enc, encSub, get, post, put } from "./api.js";
import { LiveChart, formatNumber } from "./chart.js";
import { asText, decodeWithSchema, hexDump, schemaVersion, splitBatch } from "./decode.js";
import { SAMPLE_MS } from "./overview.js";
import { ask, bytes, card, denied, h, notice, showError, table, fill } from "./ui.js";

export async function topicPage(main, [domain, tenant, ns, local], ctx) {
  const name = `${domain}://${tenant}/${ns}/${local}`;
  const path = `/admin/v2/${domain}/${enc(tenant)}/${enc(ns)}/${enc(local)}`;
  const persistent = domain === "persistent";
  const { partitions } = await get(`${path}/partitions`).catch((e) => { if (e.signIn) throw e; return { partitions: 0 }; });
  const statsPath = partitions ? `${path}/partitioned-stats?perPartition=false` : `${path}/stats`;
  let stats;
  try { stats = await get(statsPath); } catch (error) {
    if (error.signIn) throw error;
    fill(main, h("h1", {}, name), denied(error));
    return;
  }
  const cards = h("div", { class: "cards", "data-testid": "topic-cards" });
  const rateCanvas = h("canvas", { "data-testid": "chart-topic-rates" });
  const backlogCanvas = h("canvas", { "data-testid": "chart-subscription-backlog" });
  const producers = h("div"), subscriptions = h("div"), consumers = h("div"), replication = h("div");
  const internal = h("div"), peeked = h("div", { id: "peeked" });
  const action = (label, fn, cls = "") => h("button", { class: cls, onclick: fn }, label);
  const done = (text) => { notice(text); refresh(); loadInternal(); };

  const topicActions = [
    action("Unload", async () => {
      if (!(await ask({ title: `Unload ${name}?`, text: "Its clients reconnect.", okText: "Unload" }))) return;
      // Back to the topic list: this page's own refresh would load the topic again at once (a stats call loads
      // a stored topic, as in Pulsar).
      try { await put(`${path}/unload`); notice(`Unloaded ${name}`); ctx.go(`#/topics/${enc(tenant)}/${enc(ns)}`); }
      catch (e) { showError(e, "Unload"); }
    }),
  ];
  if (persistent) {
    topicActions.push(
      action("Compact", async () => {
        if (!(await ask({ title: `Compact ${name}?`, text: "Only the latest message of each key is kept for compacted readers.", okText: "Compact" }))) return;
        try { await put(`${path}/compaction`); done(`Compaction of ${name} started`); } catch (e) { showError(e, "Compact"); }
      }),
      action("Terminate", async () => {
        if (!(await ask({ title: `Terminate ${name}?`, text: "No message can be published to it any more. This cannot be undone.", okText: "Terminate", danger: true }))) return;
        try { const last = await post(`${path}/terminate${partitions ? "/partitions" : ""}`); done(`Terminated ${name}: last message ${JSON.stringify(last)}`); } catch (e) { showError(e, "Terminate"); }
      }, "danger"));
  }
  topicActions.push(action("Delete", async () => {
    if (!(await ask({ title: `Delete ${name}?`, text: "Its messages and subscriptions go; clients are disconnected.", okText: "Delete", danger: true }))) return;
    try {
      await del(`${path}${partitions ? "/partitions" : ""}?force=true`);
      notice(`Deleted ${name}`);
      ctx.go(`#/topics/${enc(tenant)}/${enc(ns)}`);
    } catch (e) { showError(e, "Delete"); }
  }, "danger"));

  fill(main, 
    h("h1", {}, name, partitions ? ` (${partitions} partitions)` : ""),
    h("div", { class: "toolbar" },
      h("a", { href: `#/topics/${enc(tenant)}/${enc(ns)}` }, `← ${tenant}/${ns}`), h("span", { class: "grow" }), topicActions),
    cards,
    h("div", { class: "charts" },
      h("div", { class: "chart" }, h("h3", {}, "Messages per second"), rateCanvas),
      h("div", { class: "chart" }, h("h3", {}, "Backlog per subscription"), backlogCanvas)),
    partitions ? h("div", {}, h("h2", {}, "Partitions"),
      h("p", {}, [...Array(partitions).keys()].map((i) =>
        [h("a", { href: `#/topic/${domain}/${enc(tenant)}/${enc(ns)}/${enc(`${local}-partition-${i}`)}` }, `partition-${i}`), " "]))) : null,
    h("h2", {}, "Subscriptions"), subscriptions,
    h("h2", {}, "Consumers"), consumers,
    h("h2", {}, "Producers"), producers,
    peeked,
    h("h2", {}, "Replication"), replication,
    h("h2", {}, "Internal stats"), internal);

  const rateChart = new LiveChart(rateCanvas, { unit: "/s" });
  const backlogChart = new LiveChart(backlogCanvas);
  let previous = null;

  const subscriptionActions = (sub) => {
    const subPath = `${path}/subscription/${encSub(sub)}`;
    const list = [];
    if (persistent) {
      if (!partitions) {
        list.push(action("Peek", () => peek(sub, subPath), "small"));
        list.push(action("Skip", async () => {
          const n = await ask({ title: `Skip messages on ${sub}`, text: "The next N messages are acknowledged without delivery.", label: "N", value: "1", okText: "Skip", danger: true });
          if (n === null) return;
          try { await post(`${subPath}/skip/${enc(n.trim())}`); done(`Skipped ${n} on ${sub}`); } catch (e) { showError(e, "Skip"); }
        }, "small danger"));
      }
      list.push(action("Clear backlog", async () => {
        if (!(await ask({ title: `Clear the backlog of ${sub}?`, text: "Every unacknowledged message of this subscription is skipped.", okText: "Clear backlog", danger: true }))) return;
        try { await post(`${subPath}/skip_all`); done(`Backlog of ${sub} cleared`); } catch (e) { showError(e, "Clear backlog"); }
      }, "small danger"));
      list.push(action("Reset cursor", async () => {
        const minutes = await ask({ title: `Reset the cursor of ${sub}`, text: "Move the subscription back (or forward) to the messages published since this many minutes ago.", label: "minutes ago", value: "10", okText: "Reset", danger: true });
        if (minutes === null) return;
        const when = Date.now() - Number(minutes) * 60000;
        if (!Number.isFinite(when)) { notice(`Not a number of minutes: ${minutes}`, true); return; }
        try { await post(`${subPath}/resetcursor/${Math.round(when)}`); done(`Cursor of ${sub} reset`); } catch (e) { showError(e, "Reset cursor"); }
      }, "small danger"));
    }
    list.push(action("Delete", async () => {
      if (!(await ask({ title: `Delete subscription ${sub}?`, text: "Its position and backlog go. Refused while a consumer is connected.", okText: "Delete", danger: true }))) return;
      try { await del(subPath); done(`Subscription ${sub} deleted`); } catch (e) { showError(e, "Delete subscription"); }
    }, "small danger"));
    return list;
  };

  const show = (s) => {
    const now = Date.now();
    const seconds = previous ? (now - previous.time) / 1000 : 0;
    const rate = (counter) => (previous && seconds > 0 ? Math.max(0, s[counter] - previous.stats[counter]) / seconds : 0);
    const rateIn = rate("msgInCounter"), rateOut = rate("msgOutCounter");
    previous = { time: now, stats: s };
    const subs = Object.entries(s.subscriptions || {});
    const backlog = subs.reduce((sum, [, x]) => sum + (x.msgBacklog || 0), 0);
    rateChart.push(now, { in: rateIn, out: rateOut });
    backlogChart.push(now, Object.fromEntries(subs.map(([sub, x]) => [sub, x.msgBacklog || 0])));
    cards.replaceChildren(
      card("Msg/s in", formatNumber(rateIn), "topic-rate-in"),
      card("Msg/s out", formatNumber(rateOut), "topic-rate-out"),
      card("Messages in (total)", formatNumber(s.msgInCounter), "topic-msg-in"),
      card("Backlog (messages)", formatNumber(backlog), "topic-backlog"),
      card("Storage", bytes(s.storageSize || 0)),
      card("Producers", (s.publishers || []).length),
      card("Subscriptions", subs.length),
      card("Average message", bytes(Math.round(s.averageMsgSize || 0))),
      card("Deduplication", s.deduplicationStatus || "-"));
    subscriptions.replaceChildren(table(
      ["Subscription", "Type", "#Backlog", "#Unacked", "#Msg/s out", "#Ack/s", "#Consumers", "#Delivered", ""],
      subs.map(([sub, x]) => [h("span", { "data-testid": "subscription-name" }, sub), x.type,
        h("span", { "data-testid": `backlog-${sub}` }, String(x.msgBacklog ?? 0)), x.unackedMessages ?? 0,
        formatNumber(x.msgRateOut), formatNumber(x.messageAckRate), (x.consumers || []).length,
        formatNumber(x.msgOutCounter), subscriptionActions(sub)]),
      { id: "subscriptions", empty: "No subscriptions." }));
    consumers.replaceChildren(table(
      ["Subscription", "Consumer", "Address", "#Permits", "#Unacked", "#Msg/s out", "Blocked", "Client"],
      subs.flatMap(([sub, x]) => (x.consumers || []).map((c) => [sub, c.consumerName, c.address,
        c.availablePermits, c.unackedMessages, formatNumber(c.msgRateOut), c.blockedConsumerOnUnackedMsgs ? "yes" : "no", c.clientVersion])),
      { id: "consumers", empty: "No consumers connected." }));
    producers.replaceChildren(table(
      ["Producer", "#Id", "Address", "Access", "#Msg/s in", "Since", "Client"],
      (s.publishers || []).map((p) => [p.producerName, p.producerId, p.address, p.accessMode,
        formatNumber(p.msgRateIn), p.connectedSince, p.clientVersion]),
      { id: "producers", empty: "No producers connected." }));
    const repl = Object.entries(s.replication || {});
    replication.replaceChildren(table(
      ["Remote cluster", "Connected", "#Backlog", "#Msg/s out", "#Msg/s in", "#Delay (s)"],
      repl.map(([cluster, r]) => [cluster, r.connected ? "yes" : "no", r.replicationBacklog ?? 0,
        formatNumber(r.msgRateOut), formatNumber(r.msgRateIn), formatNumber(r.replicationDelayInSeconds ?? 0)]),
      { id: "replication", empty: "Not replicated." }));
  };

  const refresh = async () => {
    try { show(await get(statsPath)); } catch (e) { if (e.status === 404) notice(`${name}: ${e.reason}`, true); }
  };

  const loadInternal = async () => {
    if (partitions) { internal.replaceChildren(h("p", { class: "muted" }, "Open a partition for its ledgers and cursors.")); return; }
    let st;
    try { st = await get(`${path}/internalStats`); } catch (e) {
      if (e.signIn) throw e;
      internal.replaceChildren(denied(e));
      return;
    }
    internal.replaceChildren(
      h("div", { class: "cards" }, card("Entries", st.numberOfEntries ?? 0, "internal-entries"), card("Size", bytes(st.totalSize ?? 0)),
        card("State", st.state ?? "-"), card("Last confirmed", st.lastConfirmedEntry ?? "-")),
      h("h3", {}, "Ledgers"),
      table(["#Ledger", "#Entries", "#Size"], (st.ledgers || []).map((l) => [l.ledgerId, l.entries, bytes(l.size)]), { id: "ledgers", empty: "No ledgers." }),
      h("h3", {}, "Cursors"),
      table(["Cursor", "Mark-delete", "Read position", "#Consumed", "#Pending reads", "State"],
        Object.entries(st.cursors || {}).map(([c, x]) => [c, x.markDeletePosition, x.readPosition,
          x.messagesConsumedCounter, x.pendingReadOps, x.state]), { id: "cursors", empty: "No cursors." }),
      h("details", {}, h("summary", {}, "Internal stats (JSON)"), h("pre", {}, JSON.stringify(st, null, 2))));
  };

  const peek = async (sub, subPath) => {
    const count = await ask({ title: `Peek messages of ${sub}`, text: "The first messages of the backlog are shown; nothing is acknowledged.", label: "how many", value: "5", okText: "Peek" });
    if (count === null) return;
    // (Not past the backlog's end: a position beyond it answers 404.)
    const backlog = Number((previous?.stats.subscriptions || {})[sub]?.msgBacklog ?? 1);
    const n = Math.max(1, Math.min(100, Number(count) || 1, backlog));
    let schemas = [];
    try { schemas = (await get(`/admin/v2/schemas/${enc(tenant)}/${enc(ns)}/${enc(local)}/schemas`)).getSchemaResponses || []; } catch { /* no schema */ }
    const messages = [];
    for (let i = 1; i <= n; i++) {
      let response;
      try { response = await call("GET", `${subPath}/position/${i}`, { raw: true }); } catch (e) {
        if (e.status === 404 && i > 1) break; // (past the end of the backlog)
        showError(e, "Peek");
        if (i === 1) return;
        break;
      }
      messages.push({ headers: response.headers, body: new Uint8Array(await response.arrayBuffer()) });
    }
    const mode = h("select", { id: "peek-mode" }, ["decoded", "text", "hex"].map((m) => h("option", { value: m }, m)));
    const list = h("div", { "data-testid": "peek-messages" });
    const render = () => list.replaceChildren(...messages.flatMap((m) => renderMessage(m, mode.value, schemas)));
    mode.addEventListener("change", render);
    render();
    peeked.replaceChildren(h("h2", {}, `Peeked from ${sub}`), h("div", { class: "toolbar" }, "Show as", mode,
      action("Close", () => peeked.replaceChildren(), "small")), list);
    peeked.scrollIntoView();
  };

  show(stats);
  await loadInternal();
  ctx.every(SAMPLE_MS, refresh);
  ctx.every(5 * SAMPLE_MS, loadInternal);
}

function renderMessage(m, mode, schemas) {
  const header = (k) => m.headers.get(k);
  const id = header("X-Pulsar-Message-ID");
  const version = schemaVersion(header("X-Pulsar-Base64-schema-version"));
  const schema = schemas.find((s) => s.version === version) || schemas[schemas.length - 1];
  const batch = Number(header("X-Pulsar-num-batch-message") || 0);
  const properties = [];
  m.headers.forEach((v, k) => { if (k.toLowerCase().startsWith("x-pulsar-property-")) properties.push(`${k.slice(18)}=${v}`); });
  const parts = batch ? splitBatch(m.body, batch).map((x, i) => ({ label: `${id} [${i}]`, payload: x.payload, props: Object.entries(x.metadata.properties).map(([k, v]) => `${k}=${v}`), key: x.metadata.partitionKey }))
    : [{ label: id, payload: m.body, props: properties, key: header("X-Pulsar-partition-key") }];
  return parts.map((p) => {
    let shown;
    if (mode === "hex") shown = hexDump(p.payload);
    else if (mode === "decoded" && schema) {
      try { shown = decodeWithSchema(schema, p.payload); } catch (e) { shown = `(cannot decode with the ${schema.type} schema: ${e.message})\n${hexDump(p.payload)}`; }
    }
    if (shown === undefined || shown === null) shown = asText(p.payload) ?? hexDump(p.payload);
    return h("div", { class: "msg", "data-testid": "peeked-message" },
      h("div", { class: "meta" }, `${p.label} · published ${header("X-Pulsar-publish-time") || "?"} · producer ${header("X-Pulsar-producer-name") || "?"}`,
        p.key ? ` · key ${p.key}` : "", p.props.length ? ` · ${p.props.join(", ")}` : "",
        schema ? ` · schema ${schema.type} v${schema.version}` : "", ` · ${p.payload.length} bytes`),
      h("pre", { "data-testid": "payload" }, shown));
  });
}

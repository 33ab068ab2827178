// Overview: the broker's figures and live charts, sampled from /admin/v2/broker-stats/overview
// every few seconds; rates are the differences of the broker's message counters between samples.
import { get } from "./api.js";
import { LiveChart, formatNumber } from "./chart.js";
import { bytes, card, denied, duration, h, fill } from "./ui.js";

export const SAMPLE_MS = 2000;
const history = []; // samples kept while the console is open: [{time, doc}], the last minutes

function rates(previous, doc) {
  if (!previous) return { in: 0, out: 0 };
  const seconds = (doc.time - previous.time) / 1000;
  if (seconds <= 0) return { in: 0, out: 0 };
  return {
    in: Math.max(0, doc.msgInCounter - previous.msgInCounter) / seconds,
    out: Math.max(0, doc.msgOutCounter - previous.msgOutCounter) / seconds,
  };
}

export async function overviewPage(main, _params, ctx) {
  let doc;
  try {
    doc = await get("/admin/v2/broker-stats/overview");
  } catch (error) {
    if (error.signIn) throw error;
    fill(main, h("h1", {}, "Overview"), denied(error),
      h("p", {}, "Go to ", h("a", { href: "#/topics" }, "topics"), " to see the namespaces this role may use."));
    return;
  }
  const cards = h("div", { class: "cards", "data-testid": "overview-cards" });
  const rateCanvas = h("canvas", { "data-testid": "chart-rates" });
  const backlogCanvas = h("canvas", { "data-testid": "chart-backlog" });
  fill(main, 
    h("h1", {}, "Overview"), cards,
    h("div", { class: "charts" },
      h("div", { class: "chart" }, h("h3", {}, "Messages per second"), rateCanvas),
      h("div", { class: "chart" }, h("h3", {}, "Backlog and connections"), backlogCanvas)));
  const rateChart = new LiveChart(rateCanvas, { unit: "/s" });
  const backlogChart = new LiveChart(backlogCanvas);
  let previous = null;
  for (const sample of history) {
    const r = rates(previous, sample);
    rateChart.push(sample.time, { in: r.in, out: r.out });
    backlogChart.push(sample.time, { backlog: sample.msgBacklog, connections: sample.connections });
    previous = sample;
  }

  const show = (d) => {
    if (history.length && d.time <= history[history.length - 1].time) return;
    const r = rates(history[history.length - 1], d);
    history.push(d);
    while (history.length && history[0].time < d.time - 10 * 60 * 1000) history.shift();
    rateChart.push(d.time, { in: r.in, out: r.out });
    backlogChart.push(d.time, { backlog: d.msgBacklog, connections: d.connections });
    cards.replaceChildren(
      card("Version", d.version, "version"),
      card("Uptime", duration(d.uptimeSeconds), "uptime"),
      card("Connections", d.connections, "connections"),
      card("Tenants / namespaces", `${d.tenants} / ${d.namespaces}`),
      card("Topics loaded", d.topics, "topics"),
      card("Producers / consumers", `${d.producers} / ${d.consumers}`),
      card("Msg/s in", formatNumber(r.in), "rate-in"),
      card("Msg/s out", formatNumber(r.out), "rate-out"),
      card("Messages in (total)", formatNumber(d.msgInCounter), "msg-in"),
      card("Backlog (messages)", formatNumber(d.msgBacklog), "backlog"),
      card("Storage", bytes(d.storageSize), "storage"),
      card("Cluster / broker", `${d.cluster} / ${d.brokerId}`));
  };
  show(doc);
  ctx.every(SAMPLE_MS, async () => {
    try { show(await get("/admin/v2/broker-stats/overview")); } catch { /* next sample */ }
  });
}

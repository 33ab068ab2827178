// Showing a peeked payload: text, hex, the messages of a batch, and schema-decoded values
// (JSON schemas as JSON; Avro's binary encoding decoded with the topic's Avro schema).

export function hexDump(bytes, limit = 4096) {
  const lines = [];
  const end = Math.min(bytes.length, limit);
  for (let at = 0; at < end; at += 16) {
    const row = bytes.subarray(at, Math.min(at + 16, end));
    const hex = [...row].map((b) => b.toString(16).padStart(2, "0")).join(" ");
    const text = [...row].map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
    lines.push(`${at.toString(16).padStart(8, "0")}  ${hex.padEnd(47)}  ${text}`);
  }
  if (bytes.length > limit) lines.push(`… ${bytes.length - limit} more bytes`);
  return lines.join("\n");
}

export function asText(bytes) {
  try { return new TextDecoder("utf-8", { fatal: true }).decode(bytes); } catch { return null; }
}

// -- protobuf, just enough for SingleMessageMetadata --------------------------------------------------
class Reader {
  constructor(bytes) { this.bytes = bytes; this.at = 0; }
  varint() {
    let result = 0n, shift = 0n;
    for (;;) {
      if (this.at >= this.bytes.length) throw new Error("truncated varint");
      const b = this.bytes[this.at++];
      result |= BigInt(b & 0x7f) << shift;
      if (!(b & 0x80)) return result;
      shift += 7n;
    }
  }
  take(n) {
    if (this.at + n > this.bytes.length) throw new Error("truncated field");
    const out = this.bytes.subarray(this.at, this.at + n);
    this.at += n;
    return out;
  }
}

function singleMessageMetadata(bytes) {
  const r = new Reader(bytes);
  const md = { properties: {}, payloadSize: 0 };
  const text = (b) => new TextDecoder().decode(b);
  while (r.at < bytes.length) {
    const key = Number(r.varint());
    const field = key >> 3, wire = key & 7;
    if (wire === 0) {
      const v = r.varint();
      if (field === 3) md.payloadSize = Number(v);
      else if (field === 8) md.sequenceId = v.toString();
      else if (field === 5) md.eventTime = Number(v);
      else if (field === 9) md.nullValue = v !== 0n;
    } else if (wire === 2) {
      const value = r.take(Number(r.varint()));
      if (field === 1) {
        const kv = new Reader(value); let k = "", val = "";
        while (kv.at < value.length) {
          const t = Number(kv.varint()); const part = kv.take(Number(kv.varint()));
          if (t >> 3 === 1) k = text(part); else val = text(part);
        }
        md.properties[k] = val;
      } else if (field === 2) md.partitionKey = text(value);
    } else if (wire === 1) r.take(8);
    else if (wire === 5) r.take(4);
    else throw new Error(`unexpected wire type ${wire}`);
  }
  return md;
}

// A batch's payload: [4-byte size][SingleMessageMetadata][payload] per message.
export function splitBatch(bytes, count) {
  const out = [];
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = 0;
  for (let i = 0; i < count && at + 4 <= bytes.length; i++) {
    const size = view.getUint32(at);
    const md = singleMessageMetadata(bytes.subarray(at + 4, at + 4 + size));
    at += 4 + size;
    out.push({ metadata: md, payload: bytes.subarray(at, at + md.payloadSize) });
    at += md.payloadSize;
  }
  return out;
}

// -- Avro binary decoding (the specification's encoding of each type) ---------------------------------
class AvroReader extends Reader {
  long() {
    const v = this.varint();
    return Number((v >> 1n) ^ -(v & 1n));
  }
  float() { const b = this.take(4); return new DataView(b.buffer, b.byteOffset, 4).getFloat32(0, true); }
  double() { const b = this.take(8); return new DataView(b.buffer, b.byteOffset, 8).getFloat64(0, true); }
  bytesValue() { return this.take(this.long()); }
  string() { return new TextDecoder().decode(this.bytesValue()); }
}

function avroValue(schema, r, named) {
  if (typeof schema === "string") {
    switch (schema) {
      case "null": return null;
      case "boolean": return r.take(1)[0] !== 0;
      case "int": case "long": return r.long();
      case "float": return r.float();
      case "double": return r.double();
      case "bytes": return hexString(r.bytesValue());
      case "string": return r.string();
      default:
        if (named.has(schema)) return avroValue(named.get(schema), r, named);
        throw new Error(`unknown Avro type ${schema}`);
    }
  }
  if (Array.isArray(schema)) return avroValue(schema[r.long()], r, named);
  if (schema.name) named.set(schema.name, schema);
  if (schema.name && schema.namespace) named.set(`${schema.namespace}.${schema.name}`, schema);
  switch (schema.type) {
    case "record": case "error": {
      const out = {};
      for (const f of schema.fields) out[f.name] = avroValue(f.type, r, named);
      return out;
    }
    case "enum": return schema.symbols[r.long()];
    case "fixed": return hexString(r.take(schema.size));
    case "array": case "map": {
      const out = schema.type === "array" ? [] : {};
      for (;;) {
        let n = r.long();
        if (n === 0) return out;
        if (n < 0) { n = -n; r.long(); }
        for (let i = 0; i < n; i++) {
          if (schema.type === "array") out.push(avroValue(schema.items, r, named));
          else { const k = r.string(); out[k] = avroValue(schema.values, r, named); }
        }
      }
    }
    default: return avroValue(schema.type, r, named);
  }
}

function hexString(bytes) { return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join(""); }

// The payload decoded with a schema (GetSchemaResponse: {type, data}); null when it does not apply.
export function decodeWithSchema(schema, bytes) {
  if (!schema) return null;
  const type = schema.type;
  if (type === "JSON") return JSON.stringify(JSON.parse(new TextDecoder().decode(bytes)), null, 2);
  if (type === "AVRO") {
    const r = new AvroReader(bytes);
    const value = avroValue(JSON.parse(schema.data), r, new Map());
    return JSON.stringify(value, null, 2);
  }
  if (type === "STRING") return new TextDecoder().decode(bytes);
  return null;
}

// X-Pulsar-Base64-schema-version: 8 bytes, big-endian.
export function schemaVersion(base64) {
  if (!base64) return null;
  const raw = atob(base64);
  let v = 0n;
  for (const ch of raw) v = (v << 8n) | BigInt(ch.charCodeAt(0));
  return Number(v);
}

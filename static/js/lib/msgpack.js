// A MessagePack decoder (https://github.com/msgpack/msgpack/blob/master/spec.md) for the API's
// binary answers, and its extension type 1: a numeric array (server/wire.py describes the bytes).
// An array comes back as the JSON's nested lists of numbers, every number the same double that
// JSON.parse gives for the JSON form, so a page cannot tell the two forms apart.

const utf8 = new TextDecoder();
const EXT_ARRAY = 1;

export function decode(buffer) {
  const bytes = buffer instanceof Uint8Array ? buffer : new Uint8Array(buffer);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let pos = 0;

  const str = (n) => { const s = utf8.decode(bytes.subarray(pos, pos + n)); pos += n; return s; };
  const bin = (n) => { const b = bytes.slice(pos, pos + n); pos += n; return b; };
  const list = (n) => { const a = new Array(n); for (let i = 0; i < n; i++) a[i] = value(); return a; };
  const map = (n) => { const o = {}; for (let i = 0; i < n; i++) { const k = value(); o[k] = value(); } return o; };
  const ext = (n) => {
    const type = view.getInt8(pos++);
    const start = pos;
    pos += n;
    return type === EXT_ARRAY ? numericArray(bytes, start, n) : { type, data: bytes.slice(start, start + n) };
  };
  const u8 = () => bytes[pos++];
  const u16 = () => { const v = view.getUint16(pos); pos += 2; return v; };
  const u32 = () => { const v = view.getUint32(pos); pos += 4; return v; };

  function value() {
    const b = bytes[pos++];
    if (b < 0x80) return b;                                   // positive fixint
    if (b < 0x90) return map(b & 0x0f);                       // fixmap
    if (b < 0xa0) return list(b & 0x0f);                      // fixarray
    if (b < 0xc0) return str(b & 0x1f);                       // fixstr
    if (b >= 0xe0) return b - 0x100;                          // negative fixint
    let v;
    switch (b) {
      case 0xc0: return null;
      case 0xc2: return false;
      case 0xc3: return true;
      case 0xc4: return bin(u8());
      case 0xc5: return bin(u16());
      case 0xc6: return bin(u32());
      case 0xc7: return ext(u8());
      case 0xc8: return ext(u16());
      case 0xc9: return ext(u32());
      case 0xca: v = view.getFloat32(pos); pos += 4; return v;
      case 0xcb: v = view.getFloat64(pos); pos += 8; return v;
      case 0xcc: return u8();
      case 0xcd: return u16();
      case 0xce: return u32();
      case 0xcf: v = Number(view.getBigUint64(pos)); pos += 8; return v;
      case 0xd0: v = view.getInt8(pos); pos += 1; return v;
      case 0xd1: v = view.getInt16(pos); pos += 2; return v;
      case 0xd2: v = view.getInt32(pos); pos += 4; return v;
      case 0xd3: v = Number(view.getBigInt64(pos)); pos += 8; return v;
      case 0xd4: return ext(1);
      case 0xd5: return ext(2);
      case 0xd6: return ext(4);
      case 0xd7: return ext(8);
      case 0xd8: return ext(16);
      case 0xd9: return str(u8());
      case 0xda: return str(u16());
      case 0xdb: return str(u32());
      case 0xdc: return list(u16());
      case 0xdd: return list(u32());
      case 0xde: return map(u16());
      case 0xdf: return map(u32());
      default: throw new Error(`msgpack: byte 0x${b.toString(16)} at ${pos - 1} is not a value`);
    }
  }

  const out = value();
  if (pos !== bytes.length) throw new Error(`msgpack: ${bytes.length - pos} bytes after the value`);
  return out;
}

// Extension type 1: [layout, digits, ndim, unsigned] + shape (uint32 LE each) + LEB128 varints of
// round(x * 10^digits), zigzag-encoded unless `unsigned`. Layout 1 is lower-triangular: the last
// two dimensions are (T, T) and row q holds columns 0..q only.
function numericArray(bytes, start, length) {
  const tril = bytes[start] === 1;
  const scale = 10 ** bytes[start + 1];
  const ndim = bytes[start + 2];
  const zigzag = bytes[start + 3] === 0;
  const head = new DataView(bytes.buffer, bytes.byteOffset + start + 4, 4 * ndim);
  const shape = Array.from({ length: ndim }, (_, i) => head.getUint32(4 * i, true));
  let pos = start + 4 + 4 * ndim;
  const end = start + length;

  function number() {
    let b = bytes[pos++];
    let z = b & 0x7f;
    let mult = 128;
    while (b >= 0x80) {                                       // arithmetic, not bit operations: z may pass 2^31
      b = bytes[pos++];
      z += (b & 0x7f) * mult;
      mult *= 128;
    }
    const n = zigzag ? (z % 2 === 0 ? z / 2 : -(z + 1) / 2) : z;
    return n / scale;                                         // the same correctly rounded double as the JSON's decimal
  }
  function build(depth, row) {
    const n = depth === ndim - 1 && tril ? row + 1 : shape[depth];
    const a = new Array(n);
    if (depth === ndim - 1) for (let i = 0; i < n; i++) a[i] = number();
    else for (let i = 0; i < n; i++) a[i] = build(depth + 1, i);
    return a;
  }

  const out = ndim === 0 ? number() : build(0, 0);
  if (pos !== end) throw new Error(`msgpack: a numeric array ended at ${pos}, not ${end}`);
  return out;
}

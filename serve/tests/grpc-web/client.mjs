// A gRPC-Web client of `atomflake serve`, as a page would call it: connect-web's gRPC-Web
// transport over fetch, with the messages and service that protoc-gen-es generated from
// proto/ (into gen/, by `buf generate`).
//
// node client.mjs BASE_URL [TOKEN]
//
// Prints one JSON object: the IDs of GetIds{5}, the decoding of the first, the IDs of a
// StreamIds{1000} (its runs expanded), the layout, and the error of GetIds{0}; or, when a
// call is refused before that, {"refused": {code, message}}. IDs are decimal strings.
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-web";
import { Ids } from "./gen/atomflake/v1/ids_pb.js";

const [baseUrl, token] = process.argv.slice(2);
const interceptors = token
  ? [(next) => async (request) => {
      request.header.set("authorization", `Bearer ${token}`);
      return next(request);
    }]
  : [];
const client = createClient(Ids, createGrpcWebTransport({ baseUrl, interceptors }));
const errorOf = (error) => {
  const connect = ConnectError.from(error);
  return { code: Code[connect.code], message: connect.rawMessage };
};

try {
  const { ids } = await client.getIds({ count: 5 });
  const decoded = await client.decode({ id: ids[0] });
  const streamed = [];
  for await (const answer of client.streamIds({ count: 1000n })) {
    for (const run of answer.runs) {
      for (let i = 0n; i < BigInt(run.count); i++) {
        streamed.push((run.first + i * run.step).toString());
      }
    }
  }
  const { layout, nodes } = await client.getLayout({});
  let error = null;
  try {
    await client.getIds({ count: 0 });
  } catch (refused) {
    error = errorOf(refused);
  }
  console.log(JSON.stringify({
    ids: ids.map(String),
    decoded: { id: String(decoded.id), node: Number(decoded.node), unixMs: Number(decoded.unixMs) },
    streamed,
    layout: { timestampBits: layout.timestampBits, nodeBits: layout.nodeBits, nodes: nodes.map(Number) },
    error,
  }));
} catch (refused) {
  console.log(JSON.stringify({ refused: errorOf(refused) }));
}

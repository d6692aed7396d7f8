// Preloaded (`node --require`) into third-party servers that listen on every interface
// (server-everything's `app.listen(PORT)`): binds them to 127.0.0.1 instead, and reports the
// port they got (PORT=0 picks a free one) on stderr as `loopback-listening <port>`.
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const server = this;
  if (typeof args[0] === "number" || (typeof args[0] === "string" && /^\d+$/.test(args[0]))) {
    if (typeof args[1] !== "string") args.splice(1, 0, "127.0.0.1");
  } else if (args[0] && typeof args[0] === "object" && args[0].host === undefined) {
    args[0] = { ...args[0], host: "127.0.0.1" };
  }
  server.once("listening", () => {
    const a = server.address();
    if (a && typeof a === "object") process.stderr.write(`loopback-listening ${a.port}\n`);
  });
  return listen.apply(server, args);
};

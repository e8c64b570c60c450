// Builds the console into gateway/console/dist, which the Go package embeds:
// src/main.ts (and the CSS it imports) bundled by esbuild into
// assets/app-HASH.{js,css}, and index.html pointing at them.
//
//   node build.mjs          write dist (replacing what is there)
//   node build.mjs --check  fail if dist differs from a fresh build
import * as esbuild from "esbuild";
import { mkdir, readFile, readdir, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const dist = path.resolve(here, "../../gateway/console/dist");
const check = process.argv.includes("--check");

// oneRuntime resolves every import of @bufbuild/protobuf from here, also
// those of the client package when clients/ts has its own node_modules: one
// copy of the runtime in the bundle, whatever is installed there.
const oneRuntime = {
  name: "one-protobuf-runtime",
  setup(build) {
    build.onResolve({ filter: /^@bufbuild\/protobuf(\/|$)/ }, (args) =>
      args.pluginData === oneRuntime
        ? undefined
        : build.resolve(args.path, { kind: args.kind, resolveDir: here, pluginData: oneRuntime }),
    );
  },
};

const result = await esbuild.build({
  absWorkingDir: here,
  entryPoints: { app: "src/main.ts" },
  outdir: path.join(dist, "assets"),
  entryNames: "[name]-[hash]",
  bundle: true,
  format: "esm",
  target: ["es2022", "chrome111", "firefox111", "safari16.4"],
  minify: true,
  legalComments: "none",
  // The client package is linked from clients/ts: read its TypeScript
  // source, and resolve its imports from here.
  conditions: ["acp-gateway-source"],
  preserveSymlinks: true,
  plugins: [oneRuntime],
  metafile: true,
  write: false,
  logLevel: "warning",
});

const rel = (p) => path.relative(dist, p).split(path.sep).join("/");
const [js, out] = Object.entries(result.metafile.outputs).find(([, o]) => o.entryPoint === "src/main.ts");
const template = await readFile(path.join(here, "index.html"), "utf8");
const files = new Map(result.outputFiles.map((f) => [rel(f.path), Buffer.from(f.contents)]));
files.set(
  "index.html",
  Buffer.from(
    template
      .replace("%APP_JS%", rel(path.resolve(here, js)))
      .replace("%APP_CSS%", rel(path.resolve(here, out.cssBundle))),
  ),
);

if (check) {
  const stale = [];
  const found = await list(dist);
  for (const [name, body] of files) {
    if (!found.has(name)) stale.push(`missing ${name}`);
    else if (!body.equals(await readFile(path.join(dist, name)))) stale.push(`changed ${name}`);
  }
  for (const name of found) if (!files.has(name)) stale.push(`extra ${name}`);
  if (stale.length) {
    console.error(`gateway/console/dist is stale (${stale.join(", ")}): run 'npm run build' in web/console and commit it`);
    process.exit(1);
  }
} else {
  await rm(dist, { recursive: true, force: true });
  for (const [name, body] of files) {
    await mkdir(path.dirname(path.join(dist, name)), { recursive: true });
    await writeFile(path.join(dist, name), body);
  }
  console.log(`wrote ${[...files.keys()].map((n) => `gateway/console/dist/${n}`).join(", ")}`);
}

async function list(dir, prefix = "") {
  const names = new Set();
  let entries = [];
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch (e) {
    if (e.code !== "ENOENT") throw e;
  }
  for (const e of entries) {
    if (e.isDirectory()) for (const n of await list(path.join(dir, e.name), `${prefix}${e.name}/`)) names.add(n);
    else names.add(prefix + e.name);
  }
  return names;
}

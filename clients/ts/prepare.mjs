// The package's `prepare` script: builds dist/ (JavaScript and
// declarations) from src/, so that a folder or git dependency, `npm pack`
// and `npm ci` here all give a package that imports. npm installs a git
// dependency's devDependencies before running it, but not a folder's:
// when TypeScript is not installed here, it is installed first (npm ci,
// from package-lock.json, without scripts).
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const npm = process.env.npm_execpath
  ? [process.execPath, process.env.npm_execpath]
  : ["npm"];
const run = (args) =>
  execFileSync(npm[0], [...npm.slice(1), ...args], { cwd: here, stdio: "inherit" });

if (!existsSync(join(here, "node_modules", "typescript", "package.json"))) {
  run(["ci", "--ignore-scripts", "--no-audit", "--no-fund"]);
}
run(["run", "build"]);

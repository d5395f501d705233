// Builds app.js into a wasi:http/proxy component with the componentize-js API
// (the `jco componentize` CLI 1.35.0 fails on some setups).
//
//   npm ci && node build.mjs [OUT.wasm]      (default: {{name}}.wasm here)
//
// componentize-js 0.23.0's StarlingMonkey exports
// wasi:http/incoming-handler@0.2.10, so the WIT in ./wit (0.2.12, what swan's
// wasmtime 48 ships) is copied to a temporary folder with every 0.2.11/0.2.12
// version rewritten to 0.2.10; wasmtime accepts the result by semver.
//
// package.json lists @bytecodealliance/preview2-shim itself because
// componentize-js 0.23.0 imports it without declaring it.
import { componentize } from '@bytecodealliance/componentize-js';
import { mkdtemp, mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const out = resolve(process.argv[2] ?? join(here, '{{name}}.wasm'));

async function copyWit(from, to) {
  await mkdir(to, { recursive: true });
  for (const entry of await readdir(from, { withFileTypes: true })) {
    if (entry.isDirectory()) {
      await copyWit(join(from, entry.name), join(to, entry.name));
    } else if (entry.name.endsWith('.wit')) {
      const text = (await readFile(join(from, entry.name), 'utf8'))
        .replace(/@0\.2\.1[12]\b/g, '@0.2.10')
        .replace(/version = 0\.2\.1[12]\b/g, 'version = 0.2.10');
      await writeFile(join(to, entry.name), text);
    }
  }
}

const wit = await mkdtemp(join(tmpdir(), '{{name}}-wit-'));
try {
  await copyWit(join(here, 'wit'), wit);
  const { component } = await componentize({
    sourcePath: join(here, 'app.js'),
    witPath: wit,
    worldName: 'servlet',
  });
  await writeFile(out, component);
  console.error(`wrote ${out} (${component.byteLength} bytes)`);
} finally {
  await rm(wit, { recursive: true, force: true });
}

/**
 * Writes the published schemas from the API schema (`npm run openapi`): docs/openapi.json, the
 * HTTP contract, and docs/config.schema.json, the configuration file's JSON Schema.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { publishedConfigSchema } from '../supervisor/config/load.js';
import { renderOpenApi } from '../api/openapi.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const version = (JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')) as { version: string }).version;
fs.writeFileSync(path.join(root, 'docs/openapi.json'), renderOpenApi(version));
fs.writeFileSync(path.join(root, 'docs/config.schema.json'), publishedConfigSchema());

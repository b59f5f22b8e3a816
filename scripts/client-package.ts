/**
 * Stages the @turnhost/client package in dist/client-package/ after `tsc -p client/tsconfig.json`
 * emitted the client there (`make client-pack` runs both, then `npm pack`). The client imports
 * only types from api/, so the package ships no schema code: the api/ output is replaced by one
 * declaration file where every type the client names is written out in full, with no import
 * (TypeBox's `Static` would otherwise need @sinclair/typebox installed to mean anything). The
 * manifest is client/package.json with the server's version. Fails, naming the file, when the
 * client imports a value from api/ or a runtime module other than its own files, node builtins
 * and ws: either would ship code (or a dependency) the package must not have.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const stage = path.join(root, 'dist/client-package');
const API_INDEX = path.join(root, 'api/schema/index.ts');

function fail(message: string): never {
  process.stderr.write(`client-package: ${message}\n`);
  process.exit(1);
}

/** Every name client/ imports from api/, all of them type-only (else the build fails). */
function apiTypeNames(): string[] {
  const names = new Set<string>();
  const dir = path.join(root, 'client');
  for (const file of fs.readdirSync(dir).filter((name) => name.endsWith('.ts'))) {
    const source = ts.createSourceFile(file, fs.readFileSync(path.join(dir, file), 'utf8'), ts.ScriptTarget.ES2022);
    for (const statement of source.statements) {
      if (!ts.isImportDeclaration(statement) && !ts.isExportDeclaration(statement)) continue;
      const specifier = statement.moduleSpecifier;
      if (specifier === undefined || !ts.isStringLiteral(specifier)) continue;
      const target = specifier.text;
      if (target.startsWith('.') && !target.startsWith('./'))
        if (path.resolve(dir, target) !== API_INDEX.replace(/\.ts$/, '.js'))
          fail(`client/${file} imports ${target}: the client may import from api/ only through api/schema/index.js`);
      if (!target.startsWith('..')) continue;
      const bindings = ts.isImportDeclaration(statement)
        ? {
            typeOnly: statement.importClause?.phaseModifier === ts.SyntaxKind.TypeKeyword,
            named: statement.importClause?.namedBindings,
          }
        : { typeOnly: statement.isTypeOnly, named: statement.exportClause };
      if (bindings.named === undefined || !('elements' in bindings.named))
        fail(`client/${file}: import names from ${target} one by one`);
      for (const element of bindings.named.elements) {
        if (!bindings.typeOnly && !element.isTypeOnly)
          fail(
            `client/${file} imports the value ${element.name.text} from ${target}: the package ships api/'s types only`,
          );
        names.add((element.propertyName ?? element.name).text);
      }
    }
  }
  return [...names].sort();
}

/** `export type Name = ...;` for each name, written out in full from the schema's types. */
function flattenedDeclarations(names: string[]): string {
  const program = ts.createProgram([API_INDEX], {
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    strict: true,
    skipLibCheck: true,
  });
  const checker = program.getTypeChecker();
  const source = program.getSourceFile(API_INDEX)!;
  const exports = checker.getExportsOfModule(checker.getSymbolAtLocation(source)!);
  const printer = ts.createPrinter({ newLine: ts.NewLineKind.LineFeed });
  const flags = ts.NodeBuilderFlags.NoTruncation | ts.NodeBuilderFlags.InTypeAlias | ts.NodeBuilderFlags.IgnoreErrors;
  const declarations = names.map((name) => {
    let symbol = exports.find((candidate) => candidate.name === name);
    if (symbol === undefined) return fail(`api/schema/index.ts exports no ${name}`);
    if (symbol.flags & ts.SymbolFlags.Alias) symbol = checker.getAliasedSymbol(symbol);
    if ((symbol.flags & ts.SymbolFlags.Type) === 0) return fail(`${name} of api/schema/index.ts is not a type`);
    // A union of flags is a number, not one member of the enum: the API takes it so.
    // eslint-disable-next-line @typescript-eslint/no-unsafe-enum-assignment
    const node = checker.typeToTypeNode(checker.getDeclaredTypeOfSymbol(symbol), undefined, flags);
    if (node === undefined) return fail(`cannot write out the type ${name}`);
    return `export type ${name} = ${printer.printNode(ts.EmitHint.Unspecified, node, source)};\n`;
  });
  return [
    '/** The API schema types the client names, written out in full from api/schema/ (generated). */\n',
    ...declarations,
  ].join('');
}

/** Runtime imports of the emitted client other than its own files, node builtins and ws. */
function foreignImports(dir: string): string[] {
  const found: string[] = [];
  for (const file of fs.readdirSync(dir).filter((name) => name.endsWith('.js'))) {
    const text = fs.readFileSync(path.join(dir, file), 'utf8');
    for (const match of text.matchAll(
      /(?:^|\n)\s*(?:import|export)\b[^'"]*?from\s+['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]/g,
    )) {
      const target = match[1] ?? match[2]!;
      if (!(target.startsWith('./') || target.startsWith('node:') || target === 'ws')) found.push(`${file}: ${target}`);
    }
  }
  return found;
}

const emitted = path.join(stage, 'dist');
if (!fs.existsSync(path.join(emitted, 'client/index.js'))) fail('run `npx tsc -p client/tsconfig.json` first');
const foreign = foreignImports(path.join(emitted, 'client'));
if (foreign.length > 0) fail(`the client would load modules outside the package:\n  ${foreign.join('\n  ')}`);

fs.rmSync(path.join(emitted, 'api'), { recursive: true, force: true });
fs.mkdirSync(path.join(emitted, 'api/schema'), { recursive: true });
fs.writeFileSync(path.join(emitted, 'api/schema/index.d.ts'), flattenedDeclarations(apiTypeNames()));

const server = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')) as { version: string };
const manifest = JSON.parse(fs.readFileSync(path.join(root, 'client/package.json'), 'utf8')) as { version: string };
fs.writeFileSync(
  path.join(stage, 'package.json'),
  `${JSON.stringify({ ...manifest, version: server.version }, null, 2)}\n`,
);
fs.copyFileSync(path.join(root, 'docs/client.md'), path.join(stage, 'README.md'));

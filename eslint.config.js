// Lint: typescript-eslint's strict, type-aware rules over the whole TypeScript tree. Layering and
// import cycles are checked by dependency-cruiser (.dependency-cruiser.cjs), formatting by prettier.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      'dist/',
      'node_modules/',
      'test/vm/.cache/',
      'identity-helper/',
      '.tap/',
      '**/*.mjs',
      '**/*.cjs',
      'eslint.config.js',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.strictTypeChecked,
  {
    languageOptions: {
      parserOptions: { project: './tsconfig.test.json', tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // Numbers and booleans print unambiguously in messages and paths.
      '@typescript-eslint/restrict-template-expressions': ['error', { allowNumber: true, allowBoolean: true }],
      // `return sendError(res, ...)` is the early exit of a handler; marking it `void` adds noise.
      '@typescript-eslint/no-confusing-void-expression': 'off',
      // With noUncheckedIndexedAccess every index is `T | undefined`; a `!` after a bounds check
      // states the invariant the check just proved, where a `?? fallback` would invent a value.
      '@typescript-eslint/no-non-null-assertion': 'off',
      // `Result<{}>` means "no fields beyond ok": `{}` is used as an empty intersection, never as "any value".
      '@typescript-eslint/no-empty-object-type': ['error', { allowObjectTypes: 'always' }],
      // Unused parameters keep a callback's documented shape when named with a leading underscore.
      // Validation deliberately matches control characters.
      'no-control-regex': 'off',
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' },
      ],
    },
  },
  {
    // A function a reader cannot hold in view is a list of steps waiting for names: the turn's
    // life, the daemon's start and every route are short lists of named calls.
    files: ['supervisor/**/*.ts', 'client/**/*.ts'],
    rules: { 'max-lines-per-function': ['error', { max: 150, skipBlankLines: false, skipComments: false }] },
  },
  {
    // The helper client mirrors the helper's own sources, one module per concern.
    files: ['supervisor/identity/**/*.ts'],
    rules: { 'max-lines': ['error', { max: 300, skipBlankLines: false, skipComments: false }] },
  },
  {
    // The status page's browser scripts (ui/): plain JavaScript served as is, outside the
    // TypeScript project, so without type-aware rules.
    files: ['ui/**/*.js'],
    ...tseslint.configs.disableTypeChecked,
    languageOptions: {
      sourceType: 'script',
      parserOptions: { project: false, program: null },
      globals: {
        window: 'readonly',
        document: 'readonly',
        fetch: 'readonly',
        WebSocket: 'readonly',
        Node: 'readonly',
        setTimeout: 'readonly',
        setInterval: 'readonly',
      },
    },
  },
  {
    // tap queues `t.test` subtests itself and checks every assertion; tests index fixed tables
    // they built a line earlier and parse JSON they produced.
    files: ['test/**/*.ts', 'bench/**/*.ts'],
    rules: {
      '@typescript-eslint/no-floating-promises': 'off',
      '@typescript-eslint/require-await': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-explicit-any': 'off',
    },
  },
);

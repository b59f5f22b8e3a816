/**
 * The one definition of the API's bodies, WebSocket messages and error codes: TypeBox schemas
 * that are JSON Schema at run time and TypeScript types at compile time (`Static<typeof X>`,
 * exported under the same names). docs/api-schema.md says how to add a route.
 */
export * from './errors.js';
export * from './events.js';
export * from './messages.js';
export * from './placement.js';
export * from './routes.js';
export * from './status.js';
export * from './turns.js';
export * from './worker-host.js';
export * from './workspaces.js';
export * from './event-payloads.js';

/**
 * Redocly's view of our extensions. Without it Redocly treats `x-` values as opaque: a `$ref`
 * in them counts as no use (so the WebSocket message components would be "unused") and their
 * shape is not checked. With it, `x-turnhost-websocket`, `x-event-kinds` and `x-error-codes`
 * are typed nodes: their schemas are linted like any other, and a misspelt key is an error.
 */
module.exports = function turnhostPlugin() {
  return {
    id: 'turnhost',
    typeExtension: {
      oas3(types) {
        return {
          ...types,
          Root: {
            ...types.Root,
            properties: {
              ...types.Root.properties,
              'x-error-codes': 'TurnhostErrorCodes',
              'x-event-kinds': 'TurnhostEventKinds',
            },
          },
          Operation: {
            ...types.Operation,
            properties: { ...types.Operation.properties, 'x-turnhost-websocket': 'TurnhostWebSocket' },
          },
          TurnhostErrorCodes: { properties: {}, additionalProperties: { type: 'integer' } },
          TurnhostEventKinds: { properties: {}, additionalProperties: 'TurnhostEventKind' },
          TurnhostEventKind: {
            properties: { schemaVersion: { type: 'integer' }, payload: 'Schema' },
            required: ['schemaVersion', 'payload'],
          },
          TurnhostWebSocket: { properties: { messages: 'TurnhostWebSocketMessages' }, required: ['messages'] },
          TurnhostWebSocketMessages: { properties: { server: 'Schema', client: 'Schema' }, required: ['server'] },
        };
      },
    },
  };
};

/**
 * Where the API token file lives when `apiToken` is not configured: `<dataDir>/api-token`. The
 * HTTP surface reads and creates it (supervisor/http/token.ts); the worker's view must hide it
 * (supervisor/view/descriptor.ts). Both depend on this one name, so it sits with the
 * configuration that chooses `dataDir` rather than with either user.
 */
import path from 'node:path';

const TOKEN_FILE_NAME = 'api-token';

export function tokenFilePath(dataDir: string): string {
  return path.join(dataDir, TOKEN_FILE_NAME);
}

/**
 * `GET /metrics`: the Prometheus text format (supervisor/observe/metrics.ts). On the API
 * listeners it needs the bearer token like every other route (Prometheus sends it with
 * `authorization: { credentials_file: ... }`); `metrics.listen` adds a separate loopback
 * listener that serves this one route without a token, for scrapers that cannot hold one.
 */
import http from 'node:http';
import type { Request, Response, Router } from 'express';
import { fail, ok, type Result } from '../../core/result.js';
import type { Logger } from '../../core/log.js';
import { parseHostPort } from '../config/load.js';
import type { Metrics } from '../observe/metrics.js';
import { route } from './routing.js';

export function registerMetricsRoute(router: Router, metrics: Metrics): void {
  route(router, '/metrics', {
    get: async (_req: Request, res: Response) => {
      const { contentType, body } = await metrics.render();
      res.setHeader('Cache-Control', 'no-store');
      res.type(contentType).send(body);
    },
  });
}

export interface MetricsListener {
  address: { host: string; port: number };
  close(): Promise<void>;
}

/** The token-free loopback listener of `metrics.listen`: GET /metrics only. */
export async function startMetricsListener(
  where: string,
  metrics: Metrics,
  logger: Logger,
): Promise<Result<{ listener: MetricsListener }, 'listen_failed'>> {
  const address = parseHostPort(where);
  if (address === null) return fail('listen_failed', `metrics.listen: cannot parse ${where}`);
  const server = http.createServer((req, res) => {
    const pathOnly = (req.url ?? '/').split('?')[0];
    if (pathOnly !== '/metrics' || (req.method !== 'GET' && req.method !== 'HEAD')) {
      res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('only GET /metrics is served here\n');
      return;
    }
    metrics.render().then(
      ({ contentType, body }) =>
        res.writeHead(200, { 'content-type': contentType, 'cache-control': 'no-store' }).end(body),
      (error: unknown) => {
        logger.error('metrics rendering failed', { error: (error as Error).message });
        res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' }).end('metrics unavailable\n');
      },
    );
  });
  const error = await new Promise<Error | null>((resolve) => {
    server.once('error', resolve);
    server.listen(address.port, address.host, () => resolve(null));
  });
  if (error !== null)
    return fail(
      'listen_failed',
      `cannot listen on ${where} (metrics.listen): ${(error as NodeJS.ErrnoException).code ?? error.message}`,
    );
  const bound = server.address() as { address: string; port: number };
  return ok({
    listener: {
      address: { host: bound.address, port: bound.port },
      close: () =>
        new Promise<void>((resolve) => {
          server.close(() => resolve());
          server.closeAllConnections();
        }),
    },
  });
}

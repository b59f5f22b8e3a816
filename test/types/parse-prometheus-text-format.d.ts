/** The parser the metrics tests read `/metrics` with; it ships no typings. */
declare module 'parse-prometheus-text-format' {
  export default function parsePrometheusTextFormat(text: string): unknown[];
}

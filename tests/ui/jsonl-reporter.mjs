// A node:test reporter for the Go test that runs this suite (shared/adapter/dashboard): one JSON
// line per test that passed or failed, {"name", "ok", "error"}, which it turns into subtests.
export default async function* jsonl(source) {
  for await (const { type, data } of source) {
    if ((type === 'test:pass' || type === 'test:fail') && data.details?.type !== 'suite') {
      const error = type === 'test:fail' ? String(data.details?.error?.cause?.stack || data.details?.error?.cause || data.details?.error) : '';
      yield JSON.stringify({ name: data.name, ok: type === 'test:pass', error }) + '\n';
    }
  }
}

/** Polls `check` every 20 ms until it holds (true) or `budgetMs` passed (false): a bound on a hang, never a timing assertion. */
export async function until(check: () => boolean, budgetMs = 10_000): Promise<boolean> {
  const deadline = Date.now() + budgetMs;
  while (!check()) {
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return true;
}

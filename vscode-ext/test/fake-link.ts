// A fake of the language client's requests and notifications: requests are answered by handlers
// the test installs; notifications are delivered by emit().
import type { ServerLink } from "../src/protocol";

export class FakeLink implements ServerLink {
  requests: [string, unknown][] = [];
  private readonly handlers = new Map<string, (params: any) => unknown>();
  private readonly listeners = new Map<string, ((p: any) => void)[]>();

  on(method: string, handler: (params: any) => unknown): this {
    this.handlers.set(method, handler);
    return this;
  }

  async sendRequest<R>(method: string, params?: unknown): Promise<R> {
    this.requests.push([method, params]);
    const h = this.handlers.get(method);
    if (!h) throw new Error(`no handler for ${method}`);
    return (await h(params)) as R;
  }

  onNotification(method: string, handler: (p: any) => void) {
    const list = this.listeners.get(method) ?? [];
    list.push(handler);
    this.listeners.set(method, list);
    return { dispose: () => this.listeners.set(method, (this.listeners.get(method) ?? []).filter((h) => h !== handler)) };
  }

  emit(method: string, params: unknown): void {
    for (const h of this.listeners.get(method) ?? []) h(params);
  }
}

export function fakeContext(): { subscriptions: { dispose(): void }[] } {
  return { subscriptions: [] };
}

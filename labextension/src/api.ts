/**
 * Requests to the notebook server's gpusessions endpoints (and the hub's notices), all
 * through ServerConnection.makeRequest: it adds JupyterLab's XSRF header and token.
 */
import { PageConfig, URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { EventStreamParser } from './sse';
import { IReply } from './types';

/** The notebook server's gpusessions API (gpusessions.notebook.handlers). */
export function apiUrl(settings: ServerConnection.ISettings, path: string): string {
  return URLExt.join(settings.baseUrl, 'gpusessions', path);
}

async function reply<T>(response: Response): Promise<IReply<T>> {
  let body: any = {};
  try {
    body = await response.json();
  } catch {
    body = {};
  }
  return { ok: response.ok, status: response.status, body: body || {} };
}

/** GET or POST <base>/gpusessions/<path>; the body is {} when the answer is not JSON. */
export async function request<T = Record<string, any>>(
  settings: ServerConnection.ISettings,
  path: string,
  method: 'GET' | 'POST' = 'GET'
): Promise<IReply<T>> {
  const init: RequestInit = {
    method,
    headers: { Accept: 'application/json', 'Content-Type': 'application/json' },
    body: method === 'POST' ? '{}' : undefined
  };
  return reply<T>(await ServerConnection.makeRequest(apiUrl(settings, path), init, settings));
}

/** JupyterHub's page data: its prefix and this server's name ('' for the default). */
export interface IHubInfo {
  hubPrefix: string;
  hubHost: string;
  serverName: string;
}

export function hubInfo(): IHubInfo | null {
  const hubPrefix = PageConfig.getOption('hubPrefix');
  if (!hubPrefix) {
    return null; // not under JupyterHub
  }
  return {
    hubPrefix,
    hubHost: PageConfig.getOption('hubHost'),
    serverName: PageConfig.getOption('hubServerName')
  };
}

/**
 * A GET to the hub itself (its gpusessions page routes, with the hub's login cookie, on
 * this page's origin): no server token goes with it.
 */
export async function hubRequest<T = Record<string, any>>(
  hub: IHubInfo,
  path: string,
  query: Record<string, string> = {}
): Promise<IReply<T>> {
  const settings = ServerConnection.makeSettings({
    baseUrl: hub.hubPrefix,
    token: '',
    appendToken: false
  });
  const q = Object.entries(query).map(([k, v]) => k + '=' + encodeURIComponent(v));
  const url = URLExt.join(settings.baseUrl, path) + (q.length ? '?' + q.join('&') : '');
  const init: RequestInit = { method: 'GET', headers: { Accept: 'application/json' } };
  return reply<T>(await ServerConnection.makeRequest(url, init, settings));
}

/** An open event stream; `close` ends it and stops reconnecting. */
export interface IEventStream {
  close(): void;
}

/**
 * Holds <base>/gpusessions/<path> open as a text/event-stream and hands each event's data
 * to `onData`. Reconnects after the server's `retry:` delay when the stream ends or the
 * network fails (as an EventSource does); an HTTP error ends it.
 */
export function openEventStream(
  settings: ServerConnection.ISettings,
  path: string,
  onData: (data: string, stream: IEventStream) => void
): IEventStream {
  let closed = false;
  let controller: AbortController | null = null;
  let timer: ReturnType<typeof setTimeout> | null = null;
  const parser = new EventStreamParser();
  const stream: IEventStream = {
    close: () => {
      closed = true;
      if (timer) {
        clearTimeout(timer);
      }
      controller?.abort();
    }
  };

  const again = () => {
    if (!closed) {
      timer = setTimeout(connect, parser.retry ?? 3000);
    }
  };

  const connect = async () => {
    controller = new AbortController();
    let response: Response;
    try {
      response = await ServerConnection.makeRequest(
        apiUrl(settings, path),
        { method: 'GET', headers: { Accept: 'text/event-stream' }, signal: controller.signal },
        settings
      );
    } catch {
      again();
      return;
    }
    if (!response.ok || !response.body) {
      return; // refused: as an EventSource, do not ask again
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) {
          break;
        }
        for (const ev of parser.feed(decoder.decode(value, { stream: true }))) {
          if (ev.event === 'message') {
            onData(ev.data, stream);
          }
          if (closed) {
            return;
          }
        }
      }
    } catch {
      // the connection dropped (or close() aborted it)
    }
    again();
  };

  void connect();
  return stream;
}

/**
 * A text/event-stream parser (the WHATWG "server-sent events" format), for the GPU
 * stream read through ServerConnection.makeRequest (an EventSource sends no headers,
 * so it could not carry the XSRF header JupyterHub asks of cookie-authenticated calls).
 */

import { IReading } from './types';

export interface IServerEvent {
  event: string;
  data: string;
  id: string;
}

export class EventStreamParser {
  /** The reconnection delay the server asked for (`retry:`), in ms. */
  retry: number | null = null;

  /** Feeds a chunk of the stream; returns the events it completed. */
  feed(chunk: string): IServerEvent[] {
    this._buffer += chunk;
    const out: IServerEvent[] = [];
    let m: RegExpExecArray | null;
    const eol = /\r\n|\r|\n/g;
    let start = 0;
    while ((m = eol.exec(this._buffer)) !== null) {
      // A lone \r at the end may be the first half of \r\n: wait for more.
      if (m[0] === '\r' && m.index === this._buffer.length - 1) {
        break;
      }
      const ev = this._line(this._buffer.slice(start, m.index));
      if (ev) {
        out.push(ev);
      }
      start = eol.lastIndex;
    }
    this._buffer = this._buffer.slice(start);
    return out;
  }

  private _line(line: string): IServerEvent | null {
    if (line === '') {
      const ev =
        this._data.length > 0
          ? { event: this._event || 'message', data: this._data.join('\n'), id: this._id }
          : null;
      this._data = [];
      this._event = '';
      return ev;
    }
    if (line.startsWith(':')) {
      return null; // a comment
    }
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) {
      value = value.slice(1);
    }
    if (field === 'data') {
      this._data.push(value);
    } else if (field === 'event') {
      this._event = value;
    } else if (field === 'id') {
      this._id = value;
    } else if (field === 'retry' && /^\d+$/.test(value)) {
      this.retry = parseInt(value, 10);
    }
    return null;
  }

  private _buffer = '';
  private _data: string[] = [];
  private _event = '';
  private _id = '';
}

/** A GPU reading from an event's data; null when it is not one. */
export function parseReading(data: string): IReading | null {
  let d: unknown;
  try {
    d = JSON.parse(data);
  } catch {
    return null;
  }
  if (!d || typeof d !== 'object' || Array.isArray(d)) {
    return null;
  }
  return d as IReading;
}

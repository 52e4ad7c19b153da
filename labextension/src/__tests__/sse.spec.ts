import { EventStreamParser, parseReading } from '../sse';

describe('the event stream parser', () => {
  it('reads the GPU stream as the server writes it', () => {
    const p = new EventStreamParser();
    const evs = p.feed('retry: 10000\n\ndata: {"enabled": true}\n\ndata: {"enabled": false}\n\n');
    expect(p.retry).toBe(10000);
    expect(evs.map(e => e.data)).toEqual(['{"enabled": true}', '{"enabled": false}']);
    expect(evs[0].event).toBe('message');
  });
  it('joins chunks cut anywhere', () => {
    const p = new EventStreamParser();
    const text = 'data: {"a": 1}\n\ndata: {"b": 2}\n\n';
    const out: string[] = [];
    for (const ch of text) {
      out.push(...p.feed(ch).map(e => e.data));
    }
    expect(out).toEqual(['{"a": 1}', '{"b": 2}']);
  });
  it('waits for the blank line', () => {
    const p = new EventStreamParser();
    expect(p.feed('data: x\n')).toEqual([]);
    expect(p.feed('\n')).toEqual([{ event: 'message', data: 'x', id: '' }]);
  });
  it('joins data lines, skips comments, knows event names and ids', () => {
    const p = new EventStreamParser();
    const evs = p.feed(': keep-alive\nid: 7\nevent: ping\ndata: one\ndata:two\n\n');
    expect(evs).toEqual([{ event: 'ping', data: 'one\ntwo', id: '7' }]);
  });
  it('takes CRLF and CR line ends, also a CRLF cut in two', () => {
    const p = new EventStreamParser();
    expect(p.feed('data: a\r\n\r\ndata: b\r')).toEqual([{ event: 'message', data: 'a', id: '' }]);
    expect(p.feed('\n\r\n')).toEqual([{ event: 'message', data: 'b', id: '' }]);
    expect(p.feed('data: c\r\rdata: d\n\n').map(e => e.data)).toEqual(['c', 'd']);
  });
  it('sends no event for a blank line alone, and ignores a bad retry', () => {
    const p = new EventStreamParser();
    expect(p.feed('\n\nretry: soon\n\n')).toEqual([]);
    expect(p.retry).toBeNull();
  });
});

describe('parseReading', () => {
  it('reads a JSON object', () => {
    expect(parseReading('{"enabled": true, "session": {"gpu": "H100"}}')).toEqual({
      enabled: true,
      session: { gpu: 'H100' }
    });
  });
  it('refuses what is not one', () => {
    expect(parseReading('not json')).toBeNull();
    expect(parseReading('[1]')).toBeNull();
    expect(parseReading('null')).toBeNull();
    expect(parseReading('3')).toBeNull();
  });
});

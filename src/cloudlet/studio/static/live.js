// A server-sent event stream that lets go of its connection while the tab is hidden: a browser
// opens at most 6 connections to one server over HTTP/1.1, and every open studio tab would hold
// its streams. Back in view it opens again, from the last event id it received (`last_event_id`
// in the query: what a reconnecting EventSource sends as Last-Event-ID). It stands in for an
// EventSource: htmx's SSE extension makes its sources with it (studio.js), job_page.js too.
export class LiveSource extends EventTarget {
  #url;
  #source = null;
  #types = new Set(["open", "error", "message"]);
  #closed = false;
  #lastId = "";
  #onVisibility = () => this.#visibility();

  constructor(url) {
    super();
    this.#url = url;
    this.onopen = null;
    this.onerror = null;
    document.addEventListener("visibilitychange", this.#onVisibility);
    this.#open();
  }

  get readyState() {
    if (this.#closed) return EventSource.CLOSED;
    return this.#source ? this.#source.readyState : EventSource.CONNECTING;
  }

  addEventListener(type, listener, options) {
    if (!this.#types.has(type)) {
      this.#types.add(type);
      this.#source?.addEventListener(type, this.#forward);
    }
    super.addEventListener(type, listener, options);
  }

  close() {
    this.#closed = true;
    this.#source?.close();
    this.#source = null;
    document.removeEventListener("visibilitychange", this.#onVisibility);
  }

  #forward = (event) => {
    if (event.lastEventId) this.#lastId = event.lastEventId;
    const copy = event instanceof MessageEvent
      ? new MessageEvent(event.type, {data: event.data, lastEventId: event.lastEventId})
      : new Event(event.type);
    // Given up for good (the server refused it, or it ended and will not reconnect): so is this.
    if (event.type === "error" && this.#source?.readyState === EventSource.CLOSED) this.close();
    if (event.type === "open") this.onopen?.(copy);
    if (event.type === "error") this.onerror?.(copy);
    this.dispatchEvent(copy);
  };

  #open() {
    if (this.#closed || document.visibilityState === "hidden") return;
    const url = new URL(this.#url, location.href);
    if (this.#lastId) url.searchParams.set("last_event_id", this.#lastId);
    this.#source = new EventSource(url);
    for (const type of this.#types) this.#source.addEventListener(type, this.#forward);
  }

  #visibility() {
    if (document.visibilityState === "hidden") {
      this.#source?.close();
      this.#source = null;
    } else if (!this.#source) {
      this.#open();
    }
  }
}

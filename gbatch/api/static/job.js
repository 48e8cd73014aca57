// The job page's live log: an EventSource on /ui/jobs/N/log (the API's follow,
// api/follow.py). Text is appended as text, never parsed as HTML.
"use strict";
(function () {
  const log = document.getElementById("log");
  const status = document.getElementById("log-status");
  const state = document.getElementById("job-state");
  if (!log) return;
  const source = new EventSource(log.dataset.src);
  function showState(name) {
    state.textContent = name;
    state.className = "state state-" + name;
  }
  source.addEventListener("state", function (e) {
    showState(JSON.parse(e.data).state);
    status.textContent = "following";
  });
  source.addEventListener("log", function (e) {
    const chunk = JSON.parse(e.data);
    const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    log.appendChild(document.createTextNode(chunk.data));
    if (atBottom) log.scrollTop = log.scrollHeight;
  });
  source.addEventListener("end", function (e) {
    showState(JSON.parse(e.data).state);
    status.textContent = "ended";
    source.close();
  });
  source.addEventListener("failed", function (e) {
    status.textContent = "stopped: " + JSON.parse(e.data).error;
    source.close();
  });
  source.onerror = function () {
    if (source.readyState === EventSource.CLOSED) status.textContent = "disconnected";
  };
})();

// The viewer's only script: live activity over Server-Sent Events, and a confirmation before destructive forms.
(function () {
  "use strict";
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) { event.preventDefault(); }
  });
  var feed = document.querySelector("[data-sse]");
  if (!feed || !window.EventSource) { return; }
  var source = new EventSource(feed.getAttribute("data-sse"));
  source.addEventListener("memos", function (message) {
    var event;
    try { event = JSON.parse(message.data); } catch (e) { return; }
    var empty = feed.querySelector(".empty");
    if (empty) { empty.remove(); }
    var item = document.createElement("li");
    item.className = "new";
    var when = document.createElement("time");
    when.textContent = new Date(event.ts).toISOString().slice(0, 16).replace("T", " ");
    var kind = document.createElement("b");
    kind.textContent = " " + event.type + " ";
    var detail = document.createElement("span");
    detail.className = "muted";
    detail.textContent = JSON.stringify(event.payload || {}).slice(0, 160);
    item.appendChild(when); item.appendChild(kind); item.appendChild(detail);
    feed.insertBefore(item, feed.firstChild);
    while (feed.children.length > 200) { feed.removeChild(feed.lastChild); }
  });
})();

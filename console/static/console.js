// Progressive enhancement only: every page works without this file.
(function () {
  'use strict';
  // Times are rendered in UTC; the reader's local time goes in a tooltip.
  var localTimes = function (root) {
    root.querySelectorAll('time[datetime]').forEach(function (t) {
      var d = new Date(t.getAttribute('datetime'));
      if (!isNaN(d)) t.title = d.toLocaleString();
    });
  };
  localTimes(document);
  // A Copy button next to secrets shown once.
  if (navigator.clipboard) {
    document.querySelectorAll('[data-copy]').forEach(function (el) {
      var b = document.createElement('button');
      b.type = 'button';
      b.className = 'copy secondary';
      b.textContent = 'Copy';
      b.setAttribute('aria-label', 'Copy to the clipboard');
      b.addEventListener('click', function () {
        navigator.clipboard.writeText(el.textContent).then(function () { b.textContent = 'Copied'; });
      });
      el.insertAdjacentElement('afterend', b);
    });
  }
  // Counts the lines of the batch-create list as they are typed.
  var list = document.getElementById('devices-create-list');
  if (list) {
    var out = document.createElement('p');
    out.className = 'hint';
    out.setAttribute('aria-live', 'polite');
    list.insertAdjacentElement('afterend', out);
    var count = function () {
      var n = list.value.split('\n').filter(function (l) { return l.trim() !== ''; }).length;
      out.textContent = n ? n + ' device(s)' : '';
    };
    list.addEventListener('input', count);
    count();
  }
  // The message box counts UTF-8 bytes, as the API does (maxlength would
  // count UTF-16 code units), and blocks a send over the limit. Line
  // breaks count one byte: the console sends them as \n.
  var body = document.getElementById('device-message-body');
  if (body && window.TextEncoder) {
    var max = parseInt(body.getAttribute('data-max-bytes'), 10);
    var enc = new TextEncoder();
    var note = document.createElement('p');
    note.id = 'device-message-bytes';
    note.className = 'hint';
    note.setAttribute('aria-live', 'polite');
    body.insertAdjacentElement('afterend', note);
    var check = function () {
      var n = enc.encode(body.value.replace(/\r\n/g, '\n')).length;
      note.textContent = n + ' / ' + max + ' bytes';
      note.classList.toggle('warn', n > max);
      body.setCustomValidity(n > max ? 'The message is ' + n + ' bytes of UTF-8; at most ' + max + ' are allowed.' : '');
    };
    body.addEventListener('input', check);
    check();
  }
  // The live event view: the server streams each new event as a table
  // row it rendered (and escaped) itself; it goes on top. The browser
  // reconnects by itself after a network error and resends the last id
  // it got, so the stream resumes where it was.
  var table = document.getElementById('events-table');
  if (table && window.EventSource) {
    var rows = document.getElementById('events-rows');
    var status = document.getElementById('events-status');
    var maxRows = parseInt(table.getAttribute('data-max-rows'), 10) || 500;
    var say = function (text, warn) {
      status.textContent = text;
      status.classList.toggle('warn', !!warn);
    };
    var es = new EventSource(table.getAttribute('data-stream'));
    say('Connecting…');
    es.onopen = function () {
      table.setAttribute('data-live', '1');
      say('Live: new events appear at the top as they happen.');
    };
    es.addEventListener('devmsg-event', function (e) {
      var empty = document.getElementById('events-empty');
      if (empty) empty.remove();
      rows.insertAdjacentHTML('afterbegin', e.data);
      localTimes(rows.rows[0]);
      while (rows.rows.length > maxRows) rows.deleteRow(rows.rows.length - 1);
    });
    es.addEventListener('devmsg-skip', function (e) {
      var tr = document.createElement('tr');
      tr.className = 'event-skip';
      var td = document.createElement('td');
      td.colSpan = 4;
      td.textContent = e.data;
      tr.appendChild(td);
      rows.insertBefore(tr, rows.firstChild);
    });
    es.addEventListener('devmsg-error', function (e) {
      es.close();
      table.removeAttribute('data-live');
      say('The live view stopped: ' + e.data + ' Reload the page to start it again.', true);
    });
    es.onerror = function () {
      table.removeAttribute('data-live');
      if (es.readyState === EventSource.CLOSED) {
        say('The live view stopped (signed out, or the server refused it). Reload the page to start it again.', true);
      } else {
        say('Connection lost; reconnecting…', true);
      }
    };
  }
  // A section with data-live="N" (a broadcast's progress) is fetched
  // again every N seconds and replaced, until the fresh one is not live.
  document.querySelectorAll('[data-live]').forEach(function (el) {
    var every = (+el.getAttribute('data-live') || 2) * 1000;
    function tick() {
      fetch(location.href, { credentials: 'same-origin' }).then(function (r) {
        return r.ok ? r.text() : null;
      }).then(function (html) {
        if (!html) return;
        var fresh = new DOMParser().parseFromString(html, 'text/html').getElementById(el.id);
        if (!fresh) return;
        el.innerHTML = fresh.innerHTML;
        if (fresh.hasAttribute('data-live')) setTimeout(tick, every);
      });
    }
    setTimeout(tick, every);
  });
})();

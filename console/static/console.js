// Progressive enhancement only: every page works without this file.
(function () {
  'use strict';
  // Times are rendered in UTC; the reader's local time goes in a tooltip.
  document.querySelectorAll('time[datetime]').forEach(function (t) {
    var d = new Date(t.getAttribute('datetime'));
    if (!isNaN(d)) t.title = d.toLocaleString();
  });
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
})();

// The layout measurements of issue 24, run inside a loaded memo by tests/cli/browser.rs.
// A function of `paper`: on screen an element may stick out of the viewport only inside a
// horizontal scroll container that itself fits; on paper (print media) nothing scrolls, so
// nothing may stick out at all. Returns a JSON string.
(function (paper) {
  var de = document.documentElement;
  var width = de.clientWidth;
  // The first screen, before anything is opened: where the decision elements end.
  function box(selector) {
    var e = document.querySelector(selector);
    if (!e) return null;
    var r = e.getBoundingClientRect();
    return { top: r.top + window.scrollY, bottom: r.bottom + window.scrollY };
  }
  var first = {
    decision: box('#decision'),
    act: box('#act'),
    rollback: box('#rollback'),
    h1: box('h1'),
    banner: box('.banner')
  };
  // On paper nothing can be clicked open: what a <details> holds must print anyway.
  var hidden = 0;
  var folded = document.querySelectorAll('details > :not(summary)');
  for (var f = 0; f < folded.length; f++) if (!folded[f].checkVisibility()) hidden++;
  // The detail one click away must fit too: open every <details>.
  var details = document.getElementsByTagName('details');
  for (var d = 0; d < details.length; d++) details[d].open = true;
  function scrolls(el) {
    var o = getComputedStyle(el).overflowX;
    return o === 'auto' || o === 'scroll';
  }
  function held(el) {
    for (var p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      if (scrolls(p)) return p.getBoundingClientRect().right <= width + 0.5;
    }
    return false;
  }
  // Elements, and the text in them: an unbreakable token (a digest) overflows its box
  // without making the box any wider.
  var boxes = [];
  var all = document.body.getElementsByTagName('*');
  for (var i = 0; i < all.length; i++) boxes.push([all[i], all[i].getBoundingClientRect()]);
  var walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  var range = document.createRange();
  for (var t = walker.nextNode(); t; t = walker.nextNode()) {
    if (!t.nodeValue.trim()) continue;
    range.selectNodeContents(t);
    boxes.push([t.parentElement, range.getBoundingClientRect()]);
  }
  var offenders = [], count = 0, widest = 0;
  for (var b = 0; b < boxes.length; b++) {
    var el = boxes[b][0], r = boxes[b][1];
    if (r.width === 0 && r.height === 0) continue;
    // A chart clips what it draws to its own box: a label past that box is cut off.
    var chart = el.ownerSVGElement ? el.ownerSVGElement.getBoundingClientRect() : null;
    var over = chart
      ? Math.max(r.right - chart.right, chart.left - r.left)
      : Math.max(r.right - width, -r.left);
    if (over <= 0.5) continue;
    if (!paper && !chart && held(el)) continue;
    count++;
    widest = Math.max(widest, over);
    if (offenders.length < 12) {
      offenders.push({
        element: el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
          (typeof el.className === 'string' && el.className ? '.' + el.className.split(' ').join('.') : ''),
        over_px: Math.round(over),
        text: (el.textContent || '').replace(/\s+/g, ' ').trim().slice(0, 50)
      });
    }
  }
  var report = {
    inner_width: window.innerWidth,
    inner_height: window.innerHeight,
    client_width: width,
    scroll_width: de.scrollWidth,
    overflowing: count,
    worst_px: Math.round(widest),
    offenders: offenders,
    folded_hidden: hidden,
    first_screen: first
  };
  return JSON.stringify(report);
})

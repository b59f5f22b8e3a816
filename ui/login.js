// The sign-in form posts the token to /ui/session; a refusal comes back as /ui/login#failed.
'use strict';
document.addEventListener('DOMContentLoaded', () => {
  if (window.location.hash === '#failed') document.getElementById('failed').hidden = false;
});

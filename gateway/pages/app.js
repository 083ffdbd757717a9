// Shared by the pages: timelines, compose, follow. Talks to the /api/* routes with the login cookie.
"use strict";

function escapeHtml(text) {
  const div = document.createElement("div");
  div.textContent = text;
  return div.innerHTML;
}

async function apiGet(path) {
  const response = await fetch(path, { credentials: "same-origin" });
  if (response.status === 401) { window.location = "/index.html"; return null; }
  if (!response.ok) throw new Error(await response.text());
  return response.json();
}

async function apiPost(path, fields) {
  const response = await fetch(path, {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams(fields).toString(),
  });
  if (response.status === 401) { window.location = "/index.html"; return null; }
  const body = await response.text();
  if (!response.ok) throw new Error(body);
  return body;
}

function renderPosts(element, posts) {
  if (!posts || posts.length === 0) {
    element.innerHTML = '<p class="empty">No posts yet.</p>';
    return;
  }
  element.innerHTML = posts.map((post) => {
    const when = new Date(Number(post.timestamp)).toLocaleString();
    const media = (post.media || []).map((m) =>
      `<img alt="" src="/get-media?filename=${encodeURIComponent(m.media_id + "." + m.media_type)}">`).join("");
    return `<div class="post"><div class="meta">@${escapeHtml(post.creator.username)} · ${when}</div>` +
      `<div>${escapeHtml(post.text)}</div>${media}</div>`;
  }).join("");
}

async function loadTimeline(kind, element, extra) {
  const query = new URLSearchParams({ start: 0, stop: 20, ...(extra || {}) });
  try {
    renderPosts(element, await apiGet(`/api/${kind}-timeline/read?${query}`));
  } catch (error) {
    element.innerHTML = `<p class="error">${escapeHtml(error.message)}</p>`;
  }
}

async function uploadMedia(file) {
  const form = new FormData();
  form.append("media", file);
  const response = await fetch("/upload-media", { method: "POST", body: form });
  if (!response.ok) throw new Error(await response.text());
  return response.json();
}

function wireCompose(form, status, onPosted) {
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    status.textContent = "";
    try {
      const fields = { text: form.text.value, post_type: "0" };
      const file = form.media.files[0];
      if (file) {
        const media = await uploadMedia(file);
        fields.media_ids = JSON.stringify([media.media_id]);
        fields.media_types = JSON.stringify([media.media_type]);
      }
      await apiPost("/api/post/compose", fields);
      form.reset();
      status.textContent = "Posted.";
      if (onPosted) onPosted();
    } catch (error) {
      status.innerHTML = `<span class="error">${escapeHtml(error.message)}</span>`;
    }
  });
}

async function loadPeople(kind, element) {
  try {
    const people = await apiGet(`/api/user/get_${kind}`);
    const key = `${kind}_id`;
    element.innerHTML = people.length
      ? people.map((p) => `<li>user ${escapeHtml(String(p[key]))}</li>`).join("")
      : '<li class="empty">none</li>';
  } catch (error) {
    element.innerHTML = `<li class="error">${escapeHtml(error.message)}</li>`;
  }
}

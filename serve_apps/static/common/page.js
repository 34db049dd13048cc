// What the human-review pages (audit, pair review) share: the status line and JSON calls to their
// server with the page's bearer token. A page binds it to where it keeps its token:
//   const { $, setStatus, authHeaders, api } = RelatePage.bind(() => state.token);
// A failed call throws an Error carrying the server's message and `.status`.
"use strict";
window.RelatePage = {
  bind(token) {
    const $ = (id) => document.getElementById(id);

    function setStatus(text, isError) {
      $("status").textContent = text;
      $("status").className = isError ? "error" : "muted";
    }

    function authHeaders() {
      const t = token();
      return t ? { Authorization: "Bearer " + t } : {};
    }

    async function api(method, path, body) {
      const headers = authHeaders();
      if (body) headers["Content-Type"] = "application/json";
      const res = await fetch(path, { method: method, headers: headers, cache: "no-store",
                                      body: body ? JSON.stringify(body) : undefined });
      const data = await res.json().catch(() => ({}));
      if (!res.ok) {
        const said = data.detail !== undefined ? data.detail : data.message;
        const err = new Error((typeof said === "string" ? said : JSON.stringify(said || data)) || res.statusText);
        err.status = res.status;
        throw err;
      }
      return data;
    }

    return { $, setStatus, authHeaders, api };
  },
};

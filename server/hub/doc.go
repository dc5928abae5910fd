// Package hub makes Linger's server a JupyterHub single-user server: it
// reads what the hub's spawner puts in the environment (Config,
// FromEnv), logs browsers in through the hub's OAuth provider (Auth:
// Login, Callback), admits a request only when the hub says its token
// belongs to someone allowed on this server (Auth.User, Allowed), and
// tells the hub when the server was last used (Auth.RunActivity), which
// the hub's idle culler reads.
//
// It follows jupyterhub-singleuser and JupyterHub's HubOAuth
// (jupyterhub/services/auth.py), which Linger is tested against:
//
//   - The login cookie is named after the OAuth client
//     (JUPYTERHUB_CLIENT_ID, e.g. jupyterhub-user-alice), holds the
//     hub's access token, and is HttpOnly and scoped to the server's
//     prefix; the OAuth state travels in the URL and in the cookie
//     CLIENT_ID-oauth-state, which must match.
//   - A token comes from "Authorization: token T" (or "bearer T"), from
//     ?token=T or from that cookie. The hub's answer about a token
//     (GET JUPYTERHUB_API_URL/user) is cached for CacheTTL.
//   - Someone is admitted when their token's scopes cover one of
//     JUPYTERHUB_OAUTH_ACCESS_SCOPES, by JupyterHub's filter rules.
//
// It depends on nothing of Linger's but notebooks/msg's date format:
// package server decides which requests need a login and how each
// refusal is answered.
package hub

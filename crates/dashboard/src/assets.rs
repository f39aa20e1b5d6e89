//! The page shell, script and style, compiled into the binary: the dashboard fetches
//! nothing from anywhere but its own server.

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};

const INDEX: &str = include_str!("../assets/index.html");
const APP_JS: &str = include_str!("../assets/app.js");
const APP_CSS: &str = include_str!("../assets/app.css");
const ICON: &str = include_str!("../assets/icon.svg");

/// No inline script, nothing from elsewhere; data URLs for the PNG export's image.
const CSP: &str =
    "default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; \
                   script-src 'self'; connect-src 'self'; frame-ancestors 'none'";

fn page(html: String) -> Response {
    (
        [
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        Html(html),
    )
        .into_response()
}

pub(crate) async fn index() -> Response {
    page(INDEX.to_string())
}

pub(crate) async fn asset(Path(name): Path<String>) -> Response {
    let (body, kind) = match name.as_str() {
        "app.js" => (APP_JS, "text/javascript; charset=utf-8"),
        "app.css" => (APP_CSS, "text/css; charset=utf-8"),
        "icon.svg" => (ICON, "image/svg+xml"),
        _ => {
            return crate::ApiError::new(StatusCode::NOT_FOUND, format!("no asset `{name}`"))
                .into_response()
        }
    };
    ([(header::CONTENT_TYPE, kind), (header::CACHE_CONTROL, "no-cache")], body).into_response()
}

pub(crate) async fn login_page() -> Response {
    page(login_html(None))
}

/// The login form (the token goes in a password field and is never echoed back), with
/// a note on the last attempt (fixed text of ours, not escaped).
pub(crate) fn login_html(note: Option<&str>) -> String {
    let note = note.map(|n| format!("<p class=\"bad\">{n}</p>")).unwrap_or_default();
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>TritonForge: log in</title><link rel=\"stylesheet\" href=\"/assets/app.css\">\
         <link rel=\"icon\" href=\"/assets/icon.svg\"></head><body><main class=\"login\">\
         <h1>TritonForge dashboard</h1><p>This server needs its token to show its data.</p>{note}\
         <form method=\"post\" action=\"/dash/login\"><label>Token \
         <input type=\"password\" name=\"token\" autocomplete=\"current-password\" required></label> \
         <button type=\"submit\">Log in</button></form></main></body></html>"
    )
}

//! Cross-origin requests from browsers (CORS) to the HTTP API and to gRPC-Web, for the
//! origins allowed.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};

/// How long a browser may keep a preflight's answer, in seconds.
const MAX_AGE_S: &str = "600";

/// The origins whose pages may call the HTTP API (`https://app.example.com`), each exactly
/// as a browser sends it in `Origin`; `*` allows any.
#[derive(Clone, Debug, Default)]
pub(crate) struct Cors {
    origins: Vec<HeaderValue>,
}

impl Cors {
    /// `origins`, checked: `*`, or a scheme, a host and perhaps a port, with no path.
    pub(crate) fn new(origins: &[String]) -> Result<Cors, String> {
        let origins = origins
            .iter()
            .map(|origin| {
                let valid = origin == "*"
                    || origin.split_once("://").is_some_and(|(scheme, rest)| {
                        matches!(scheme, "http" | "https") && !rest.is_empty() && !rest.contains('/')
                    });
                valid
                    .then(|| HeaderValue::from_str(origin).ok())
                    .flatten()
                    .ok_or_else(|| {
                        format!(
                            "CORS origin {origin:?} is invalid: allowed * or SCHEME://HOST[:PORT] (http or https, no path)"
                        )
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(Cors { origins })
    }

    /// The `Origin` of `headers` when it is allowed: what `Access-Control-Allow-Origin`
    /// answers.
    fn allowed(&self, headers: &HeaderMap) -> Option<HeaderValue> {
        let origin = headers.get(header::ORIGIN)?;
        self.origins
            .iter()
            .any(|allowed| allowed == "*" || allowed == origin)
            .then(|| origin.clone())
    }

    /// The answer to a preflight (`OPTIONS` with `Access-Control-Request-Method`) from an
    /// allowed origin: 204, `GET` (the HTTP API) and `POST` (gRPC-Web) allowed with the
    /// headers their clients send. `None` for any other request.
    pub(crate) fn preflight<B>(&self, request: &Request<B>) -> Option<Response<Body>> {
        let headers = request.headers();
        if request.method() != Method::OPTIONS || !headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
        {
            return None;
        }
        let origin = self.allowed(headers)?;
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::NO_CONTENT;
        let answer = response.headers_mut();
        answer.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        answer.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST"),
        );
        answer.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(
                "authorization, content-type, grpc-timeout, x-grpc-web, x-user-agent, grpc-accept-encoding",
            ),
        );
        answer.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static(MAX_AGE_S),
        );
        answer.insert(header::VARY, HeaderValue::from_static("origin"));
        Some(response)
    }

    /// Lets the page of an allowed `origin` read `response`, and a gRPC-Web client the
    /// status of a trailers-only answer: the origin found in the request's headers before
    /// it was routed.
    pub(crate) fn allow<B>(origin: Option<HeaderValue>, response: &mut Response<B>) {
        if let Some(origin) = origin {
            let headers = response.headers_mut();
            headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
            headers.insert(
                header::ACCESS_CONTROL_EXPOSE_HEADERS,
                HeaderValue::from_static("grpc-status, grpc-message, grpc-status-details-bin"),
            );
            headers.append(header::VARY, HeaderValue::from_static("origin"));
        }
    }

    /// The origin of a request to answer with [`allow`](Self::allow), when it is allowed.
    pub(crate) fn origin_of<B>(&self, request: &Request<B>) -> Option<HeaderValue> {
        if self.origins.is_empty() {
            return None;
        }
        self.allowed(request.headers())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_origin_is_refused_naming_it() {
        for origin in ["app.example.com", "ftp://x", "https://x/path", "https://"] {
            assert_eq!(
                Cors::new(&[origin.to_owned()]).unwrap_err(),
                format!(
                    "CORS origin {origin:?} is invalid: allowed * or SCHEME://HOST[:PORT] (http or https, no path)"
                )
            );
        }
        assert!(Cors::new(&["https://app.example.com:8443".to_owned(), "*".to_owned()]).is_ok());
    }

    #[test]
    fn only_an_allowed_origin_is_answered() {
        let cors = Cors::new(&["https://app.example.com".to_owned()]).unwrap();
        let request = |origin: &str| {
            Request::builder()
                .method(Method::OPTIONS)
                .uri("/v1/ids")
                .header(header::ORIGIN, origin)
                .header(header::ACCESS_CONTROL_REQUEST_METHOD, "GET")
                .body(())
                .unwrap()
        };
        let answer = cors.preflight(&request("https://app.example.com")).unwrap();
        assert_eq!(answer.status(), StatusCode::NO_CONTENT);
        assert_eq!(
            answer.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN],
            "https://app.example.com"
        );
        assert!(cors.preflight(&request("https://evil.example.com")).is_none());
        assert_eq!(cors.origin_of(&request("https://evil.example.com")), None);
        assert!(
            Cors::default()
                .origin_of(&request("https://app.example.com"))
                .is_none()
        );
    }
}

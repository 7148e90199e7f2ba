//! Where an export goes, or a history comes from: a local path (the default), a `file://` URL, or an object
//! store URL (`s3://bucket/prefix`). S3 takes the usual environment: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`
//! (and `AWS_SESSION_TOKEN`), `AWS_REGION` (or `AWS_DEFAULT_REGION`), `AWS_ENDPOINT_URL` (or `AWS_ENDPOINT`) for an
//! S3-compatible server, `AWS_ALLOW_HTTP=true` (implied by an `http://` endpoint). Credentials are never taken
//! from the URL (one that holds them is refused) and no message repeats them.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Once};
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, RetryConfig};

use crate::error::ExportError;

/// A parsed location.
#[derive(Debug, Clone)]
pub enum Location {
    /// A local path (given as a path or a `file://` URL).
    Local(PathBuf),
    /// An object in an object store, or a prefix of objects.
    Store(StoreUrl),
}

/// An object store location: which store, and the key or prefix in it.
#[derive(Debug, Clone)]
pub struct StoreUrl {
    /// The URL as given, for messages (it holds no credential).
    pub url: String,
    /// The bucket.
    pub bucket: String,
    /// The key (a file) or prefix (a dataset), without leading or trailing `/`.
    pub key: String,
}

impl Location {
    /// Parses `--out` (or a history's location): `s3://bucket/prefix`, `file:///path`, or a path.
    pub fn parse(s: &str) -> Result<Location, ExportError> {
        let Some((scheme, _)) = s.split_once("://") else {
            return Ok(Location::Local(PathBuf::from(s)));
        };
        let url = url::Url::parse(s)
            .map_err(|e| ExportError::Refused(format!("{s}: not a URL ({e})")))?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(ExportError::Refused(format!(
                "{scheme}:// URL with credentials refused: give them in the environment (AWS_ACCESS_KEY_ID, \
                 AWS_SECRET_ACCESS_KEY), never in a URL that logs and shell histories keep"
            )));
        }
        match scheme {
            "file" => url.to_file_path().map(Location::Local).map_err(|()| {
                ExportError::Refused(format!("{s}: not a local file URL (file:///path)"))
            }),
            "s3" | "s3a" => {
                let bucket = url.host_str().unwrap_or_default().to_owned();
                if bucket.is_empty() {
                    return Err(ExportError::Refused(format!(
                        "{s}: no bucket (s3://bucket/prefix)"
                    )));
                }
                let key = url.path().trim_matches('/').to_owned();
                Ok(Location::Store(StoreUrl {
                    url: s.to_owned(),
                    bucket,
                    key,
                }))
            }
            other => Err(ExportError::Refused(format!(
                "{other}:// is not a store tickbox writes to: give a path, file:///path or s3://bucket/prefix"
            ))),
        }
    }

    /// Whether this is an object store location.
    pub fn is_store(&self) -> bool {
        matches!(self, Location::Store(_))
    }

    /// How messages name it.
    pub fn shown(&self) -> String {
        match self {
            Location::Local(p) => p.display().to_string(),
            Location::Store(u) => u.url.clone(),
        }
    }
}

impl StoreUrl {
    /// The object path of `rel` under this location's key.
    pub fn object(&self, rel: &str) -> ObjectPath {
        let rel = rel.trim_matches('/');
        match (self.key.is_empty(), rel.is_empty()) {
            (true, _) => ObjectPath::from(rel),
            (false, true) => ObjectPath::from(self.key.as_str()),
            (false, false) => ObjectPath::from(format!("{}/{rel}", self.key)),
        }
    }

    /// The URL of `rel` under this location, for messages and summaries.
    pub fn url_of(&self, rel: &str) -> String {
        format!("s3://{}/{}", self.bucket, self.object(rel))
    }
}

/// Whether the environment names credentials (or asks for none): without any, the S3 client would go on to ask
/// the cloud instance's metadata service, which is nowhere on most hosts and must not be asked by surprise.
fn credentials_configured() -> bool {
    let set = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty());
    (set("AWS_ACCESS_KEY_ID") && set("AWS_SECRET_ACCESS_KEY"))
        || set("AWS_WEB_IDENTITY_TOKEN_FILE")
        || set("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
        || std::env::var("AWS_SKIP_SIGNATURE").is_ok_and(|v| v == "true")
}

/// Connects an S3 client for `url`'s bucket from the environment. Nothing is sent yet.
pub fn s3_store(url: &StoreUrl) -> Result<Arc<dyn ObjectStore>, ExportError> {
    static RUSTLS: Once = Once::new();
    // rustls is built without a bundled crypto provider (see Cargo.toml): install ring's once per process. An
    // error means one is installed already, which is as good.
    RUSTLS.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    if !credentials_configured() {
        return Err(ExportError::Store {
            url: url.url.clone(),
            reason: "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or \
                     AWS_SKIP_SIGNATURE=true for a public bucket)"
                .into(),
        });
    }
    let endpoint = std::env::var("AWS_ENDPOINT_URL")
        .or_else(|_| std::env::var("AWS_ENDPOINT"))
        .ok();
    let mut b = AmazonS3Builder::from_env()
        .with_bucket_name(&url.bucket)
        // A store that does not answer is one clear line within seconds, not ten retries over three minutes.
        .with_client_options(
            ClientOptions::new()
                .with_connect_timeout(Duration::from_secs(5))
                .with_timeout(Duration::from_secs(120)),
        )
        .with_retry(RetryConfig {
            max_retries: 3,
            retry_timeout: Duration::from_secs(20),
            ..RetryConfig::default()
        });
    if let Some(e) = &endpoint {
        b = b.with_endpoint(e);
        if e.starts_with("http://") {
            b = b.with_allow_http(true);
        }
    }
    let store = b.build().map_err(|e| ExportError::store(&url.url, e))?;
    Ok(Arc::new(store))
}

/// One current-thread runtime to drive the object store's async API from synchronous code.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, ExportError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ExportError::io("the object store's runtime", e))
}

/// A listing of one level: the objects (name, size) and the sub-prefixes (names).
pub type Listing = (Vec<(String, u64)>, Vec<String>);

/// A connected object store location: the client, its runtime, and the URL.
pub struct Store {
    /// The location.
    pub url: StoreUrl,
    /// The client.
    pub store: Arc<dyn ObjectStore>,
    pub(crate) rt: tokio::runtime::Runtime,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("url", &self.url.url).finish()
    }
}

impl Store {
    /// Connects to `url`'s store and checks that it answers and lets us list the location (one request): an
    /// unreachable or unauthorised store is an error before anything is read or written.
    pub fn connect(url: &StoreUrl) -> Result<Store, ExportError> {
        let store = s3_store(url)?;
        let s = Store {
            url: url.clone(),
            store,
            rt: runtime()?,
        };
        s.list_dir("")?;
        Ok(s)
    }

    /// The objects directly under `rel` (a prefix) and the sub-prefixes: `(files, dirs)`, names relative to
    /// `rel`.
    pub fn list_dir(&self, rel: &str) -> Result<Listing, ExportError> {
        let prefix = self.url.object(rel);
        let prefix = (!prefix.as_ref().is_empty()).then_some(prefix);
        let listing = self
            .rt
            .block_on(self.store.list_with_delimiter(prefix.as_ref()))
            .map_err(|e| ExportError::store(&self.url.url, e))?;
        let strip = |p: &ObjectPath| {
            p.filename()
                .map(str::to_owned)
                .unwrap_or_else(|| p.to_string())
        };
        Ok((
            listing
                .objects
                .iter()
                .map(|o| (strip(&o.location), o.size))
                .collect(),
            listing.common_prefixes.iter().map(strip).collect(),
        ))
    }

    /// Every object under `rel`, recursively: `(path relative to the location's key, size)`.
    pub fn list_all(&self, rel: &str) -> Result<Vec<(String, u64)>, ExportError> {
        use futures_util::TryStreamExt;
        let prefix = self.url.object(rel);
        let base = self.url.object("");
        let prefix = (!prefix.as_ref().is_empty()).then_some(prefix);
        let objects: Vec<_> = self
            .rt
            .block_on(self.store.list(prefix.as_ref()).try_collect::<Vec<_>>())
            .map_err(|e| ExportError::store(&self.url.url, e))?;
        Ok(objects
            .into_iter()
            .map(|o| {
                let full = o.location.to_string();
                let rel = full
                    .strip_prefix(base.as_ref())
                    .unwrap_or(&full)
                    .trim_start_matches('/')
                    .to_owned();
                (rel, o.size)
            })
            .collect())
    }

    /// Uploads the local file `from` as `rel` (multipart for large files), returning the bytes sent.
    pub fn upload(&self, from: &Path, rel: &str) -> Result<u64, ExportError> {
        use std::io::Read;
        const CHUNK: usize = 8 << 20;
        let to = self.url.object(rel);
        let mut file = std::fs::File::open(from).map_err(|e| ExportError::io(from.display(), e))?;
        let len = file
            .metadata()
            .map_err(|e| ExportError::io(from.display(), e))?
            .len();
        let err = |e: object_store::Error| ExportError::store(&self.url.url_of(rel), e);
        if len <= CHUNK as u64 {
            let mut buf = Vec::with_capacity(len as usize);
            file.read_to_end(&mut buf)
                .map_err(|e| ExportError::io(from.display(), e))?;
            self.rt
                .block_on(self.store.put(&to, buf.into()))
                .map_err(err)?;
            return Ok(len);
        }
        self.rt.block_on(async {
            let upload = self.store.put_multipart(&to).await.map_err(err)?;
            let mut w = object_store::WriteMultipart::new_with_chunk_size(upload, CHUNK);
            let mut buf = vec![0u8; CHUNK];
            loop {
                let n = file
                    .read(&mut buf)
                    .map_err(|e| ExportError::io(from.display(), e))?;
                if n == 0 {
                    break;
                }
                // At most two parts in flight: memory stays a few chunks whatever the file's size.
                w.wait_for_capacity(2).await.map_err(err)?;
                w.write(&buf[..n]);
            }
            w.finish().await.map_err(err)?;
            Ok::<_, ExportError>(())
        })?;
        Ok(len)
    }

    /// Deletes `rel` (best effort: used to take back a failed export's uploads).
    pub fn delete(&self, rel: &str) -> Result<(), ExportError> {
        let to = self.url.object(rel);
        self.rt
            .block_on(self.store.delete(&to))
            .map_err(|e| ExportError::store(&self.url.url_of(rel), e))
    }

    /// Reads bytes `range` of `rel` (one ranged GET).
    pub fn get_range(
        &self,
        rel: &str,
        range: std::ops::Range<u64>,
    ) -> Result<Vec<u8>, ExportError> {
        let at = self.url.object(rel);
        let b = self
            .rt
            .block_on(self.store.get_range(&at, range))
            .map_err(|e| ExportError::store(&self.url.url_of(rel), e))?;
        Ok(b.to_vec())
    }

    /// Downloads `rel` into the local file `to`, streaming.
    pub fn download(&self, rel: &str, to: &Path) -> Result<u64, ExportError> {
        use futures_util::StreamExt;
        use std::io::Write;
        let at = self.url.object(rel);
        let err = |e: object_store::Error| ExportError::store(&self.url.url_of(rel), e);
        let mut out = std::fs::File::create(to).map_err(|e| ExportError::io(to.display(), e))?;
        self.rt.block_on(async {
            let got = self.store.get(&at).await.map_err(err)?;
            let mut stream = got.into_stream();
            let mut n = 0u64;
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(err)?;
                out.write_all(&chunk)
                    .map_err(|e| ExportError::io(to.display(), e))?;
                n += chunk.len() as u64;
            }
            Ok(n)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse() {
        assert!(
            matches!(Location::parse("out/day").unwrap(), Location::Local(p) if p == Path::new("out/day"))
        );
        assert!(
            matches!(Location::parse("file:///tmp/x").unwrap(), Location::Local(p) if p == Path::new("/tmp/x"))
        );
        let Location::Store(u) = Location::parse("s3://bucket/a/b/").unwrap() else {
            panic!()
        };
        assert_eq!((u.bucket.as_str(), u.key.as_str()), ("bucket", "a/b"));
        assert_eq!(
            u.object("date=1/kind=q/part.parquet").as_ref(),
            "a/b/date=1/kind=q/part.parquet"
        );
        assert_eq!(u.url_of("x"), "s3://bucket/a/b/x");
        let err = Location::parse("s3://AKIA:secret@bucket/x")
            .unwrap_err()
            .to_string();
        assert!(
            !err.contains("secret") && err.contains("environment"),
            "{err}"
        );
        assert!(Location::parse("gs://b/x").is_err());
        assert!(Location::parse("s3:///x").is_err());
    }
}

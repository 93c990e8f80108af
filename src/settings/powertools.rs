//! The Powertools interop from the `SQS_CLAIM_POWERTOOLS_*` variables: keys and payload hashes
//! as a Powertools-Python record handler derives them, to share its table.

use crate::Error;
use crate::powertools::{HashFunction, PowertoolsFormat, RecordPayload};

use super::read::{invalid, read};
use super::{
    POWERTOOLS_FUNCTION_VAR, POWERTOOLS_HANDLER_VAR, POWERTOOLS_HASH_VAR,
    POWERTOOLS_KEY_PREFIX_VAR, POWERTOOLS_VALIDATION_VAR,
};

/// The Powertools interop from the `SQS_CLAIM_POWERTOOLS_*` variables (`get` reads one, an
/// empty value counting as unset; `aws_function_name` is `AWS_LAMBDA_FUNCTION_NAME` as
/// Lambda sets it). No I/O.
///
/// Off (`None`) unless `SQS_CLAIM_POWERTOOLS_HANDLER` or `SQS_CLAIM_POWERTOOLS_KEY_PREFIX` is
/// set. On, the key is `{FUNCTION}.{HANDLER}#{hash}` as Powertools writes it
/// ([`PowertoolsFormat::new`]), the function name being `SQS_CLAIM_POWERTOOLS_FUNCTION`, else
/// `AWS_LAMBDA_FUNCTION_NAME` (an empty value kept, as Python's `os.getenv` returns it), else
/// `test-func`: what [`PowertoolsFormat::from_env`] reads, through `get` rather than the
/// process environment. A key prefix replaces `{FUNCTION}.{HANDLER}`, as Powertools'
/// `key_prefix` does. Fails with [`ErrorKind::Config`](crate::ErrorKind::Config) naming the variable for a handler that
/// is not `module.qualname`, a hash other than `md5` or `sha256`, a validation other than
/// `body` or `json:/pointer`, and for any `SQS_CLAIM_POWERTOOLS_*` set while the interop is
/// off (a typo in the switch would otherwise silently keep sqs-claim's own keys).
///
/// ```
/// use sqs_claim::settings::powertools;
///
/// let env = |name: &str| match name {
///     "SQS_CLAIM_POWERTOOLS_HANDLER" => Some("app.record_handler".to_owned()),
///     _ => None,
/// };
/// let format = powertools(&env, Some("orders-fn".into())).unwrap().unwrap();
/// assert_eq!(format.prefix(), "orders-fn.app.record_handler");
/// assert!(powertools(&|_: &str| None, None).unwrap().is_none());
/// ```
pub fn powertools(
    get: &dyn Fn(&str) -> Option<String>,
    aws_function_name: Option<String>,
) -> Result<Option<PowertoolsFormat>, Error> {
    let raw = get;
    let get = |name: &str| {
        raw(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let handler = get(POWERTOOLS_HANDLER_VAR);
    let key_prefix = get(POWERTOOLS_KEY_PREFIX_VAR);
    if handler.is_none() && key_prefix.is_none() {
        for var in [
            POWERTOOLS_FUNCTION_VAR,
            POWERTOOLS_HASH_VAR,
            POWERTOOLS_VALIDATION_VAR,
        ] {
            if get(var).is_some() {
                return Err(invalid(
                    var,
                    format!(
                        "it is set but the Powertools interop is off: set \
                         {POWERTOOLS_HANDLER_VAR} (the record handler's module.qualname, e.g. \
                         app.record_handler) or {POWERTOOLS_KEY_PREFIX_VAR}"
                    ),
                ));
            }
        }
        return Ok(None);
    }
    let mut format = match (key_prefix, handler) {
        (Some(prefix), _) => PowertoolsFormat::with_key_prefix(prefix),
        (None, Some(handler)) => {
            // `{module}.{qualname}`: a module and a name, nothing that would end the prefix
            // (`#`) or could not be in a Python name.
            let ok = handler.contains('.')
                && !handler.starts_with('.')
                && !handler.ends_with('.')
                && !handler.contains(|c: char| c == '#' || c.is_whitespace());
            if !ok {
                return Err(invalid(
                    POWERTOOLS_HANDLER_VAR,
                    format!(
                        "{handler:?} is not the decorated function's module.qualname (e.g. \
                         app.record_handler for record_handler in app.py)"
                    ),
                ));
            }
            let function = get(POWERTOOLS_FUNCTION_VAR)
                .or(aws_function_name)
                .unwrap_or_else(|| crate::powertools::DEFAULT_FUNCTION_NAME.to_owned());
            PowertoolsFormat::new(function, handler)
        }
        (None, None) => return Ok(None),
    };
    if let Some(hash) = read::<HashFunction>(&raw, POWERTOOLS_HASH_VAR)? {
        format = format.with_hash_function(hash);
    }
    if let Some(payload) = read::<RecordPayload>(&raw, POWERTOOLS_VALIDATION_VAR)? {
        format = format.with_record_validation(payload);
    }
    Ok(Some(format))
}

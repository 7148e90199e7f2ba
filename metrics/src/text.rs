//! A reader of the text exposition format, for `tickbox top` and tests: samples with their labels. It reads what
//! any Prometheus client writes (comments skipped, label values unescaped); what it cannot read is skipped.

/// One sample line: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The sample's name, suffix included (`tickbox_received_total`, `..._bucket`).
    pub name: String,
    /// Its labels, in the order written.
    pub labels: Vec<(String, String)>,
    /// Its value (`+Inf`, `-Inf` and `NaN` included).
    pub value: f64,
}

impl Sample {
    /// The value of label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Every sample of `text` that parses.
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(['{', ' '])?;
    let name = &line[..name_end];
    // A sample without a name is not the format (`{a="b"} 1`): skipped like any line that does not read.
    if name.is_empty() {
        return None;
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        let mut chars = after.char_indices().peekable();
        loop {
            // A key up to '=', then a quoted value.
            let (start, c) = *chars.peek()?;
            if c == '}' {
                rest = &after[start + 1..];
                break;
            }
            if c == ',' || c == ' ' {
                chars.next();
                continue;
            }
            let eq = after[start..].find('=')? + start;
            let key = after[start..eq].trim().to_owned();
            while chars.peek().is_some_and(|&(i, _)| i <= eq) {
                chars.next();
            }
            if chars.next()?.1 != '"' {
                return None;
            }
            let mut value = String::new();
            loop {
                match chars.next()?.1 {
                    '"' => break,
                    '\\' => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        other => value.push(other),
                    },
                    other => value.push(other),
                }
            }
            labels.push((key, value));
        }
    }
    let value_text = rest.split_whitespace().next()?;
    let value = match value_text {
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_with_escaped_labels_and_special_values() {
        let s = parse(
            "# HELP x y\n# TYPE x counter\nx_total{role=\"feed\",shard=\"0\"} 12\n\
             h_bucket{le=\"+Inf\",a=\"q\\\"uote\\\\ \\n\"} 3\nplain 1.5e3\nweird{ 4\nbad value\n# EOF\n",
        );
        assert_eq!(s.len(), 3, "{s:?}");
        assert_eq!(s[0].name, "x_total");
        assert_eq!(s[0].label("shard"), Some("0"));
        assert_eq!(s[0].value, 12.0);
        assert_eq!(s[1].label("a"), Some("q\"uote\\ \n"));
        assert_eq!(s[1].label("le"), Some("+Inf"));
        assert_eq!(s[2].value, 1500.0);
        assert!(s[2].labels.is_empty());
    }

    #[test]
    fn a_sample_without_a_name_is_skipped() {
        // Found by the fuzz target (metrics_text): a line that starts with its labels.
        assert!(parse("{a=\"b\"} 1\n 2\n").is_empty());
        assert_eq!(parse("{a=\"b\"} 1\nok 2\n").len(), 1);
    }
}

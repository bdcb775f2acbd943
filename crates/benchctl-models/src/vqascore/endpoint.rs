//! VQAScore through an OpenAI-compatible chat-completions server (vLLM, SGLang, llama.cpp's
//! `llama-server`, OpenAI itself): one request per (image, caption) pair, as `t2v_metrics`'
//! API models send it, the user message holding the question and then the image as a data
//! URI of its bytes, `max_tokens: 1`, `logprobs: true` and `top_logprobs`; the score read
//! from the first generated token's top log-probabilities ([`super::read_top_logprobs`]).
//! [`ImagePosition::BeforeQuestion`] sends the image first instead, the order of
//! `t2v_metrics`' local models (Gemma 3, PaliGemma, Qwen), so a server rendering the
//! checkpoint's own chat template sees the prompt those models are scored on locally.
//!
//! Every request is bounded (a connect timeout, one deadline for the whole request: sending,
//! the headers and the whole answer, however slowly a server drips it; an answer size limit)
//! and retried with exponential backoff on 408, 429, 5xx and network failures (a `Retry-After`
//! in seconds is honoured, capped); any other failure (a redirect, which is not followed; an
//! answer over the size limit), and an answer without log-probabilities, is an error naming
//! the server and the model, never a score. The API key never appears in a message: a server
//! that quotes the request back has the key, and any `Bearer` token, redacted.

use std::io::Read;
use std::time::Duration;

use base64::Engine as _;
use serde::Deserialize;
use url::Url;

use super::reply::ReplyReading;
use super::{by_name, read_top_logprobs, Reading, Template};
pub use super::{AnswerRule, GENERATED_TOKENS};
use crate::{Error, ErrorKind, Result};

/// Where and how to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointSettings {
    /// The server's OpenAI base URL (`http://host:8000/v1`) or its chat-completions URL.
    pub url: String,
    /// The model name the server serves (the request's `model`).
    pub served_model: String,
    /// Sent as `Authorization: Bearer …` when set.
    pub api_key: Option<String>,
    /// How many top log-probabilities to ask for (`t2v_metrics`: 2).
    pub top_logprobs: u32,
    pub connect_timeout: Duration,
    /// The longest a whole request may take, from connecting to the answer's last byte (a
    /// large model under load answers slowly; a server that drips its answer is cut off).
    pub request_timeout: Duration,
    /// Further attempts after a retryable failure.
    pub retries: u32,
    /// The first retry's wait; each next one doubles it (capped at [`MAX_BACKOFF`]).
    pub backoff: Duration,
    /// Where the image goes in the user message.
    pub image_position: ImagePosition,
    /// How the answer is read: its log-probability, or a reply generated and searched.
    pub answer_rule: AnswerRule,
    /// How a generated reply is searched ([`AnswerRule::Generate`]): as the suite's official
    /// code reads replies.
    pub reply_reading: ReplyReading,
}

/// Where the image goes in the user message, relative to the question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ImagePosition {
    /// The question, then the image: `t2v_metrics`' API models (GPT-4o, Gemini).
    #[default]
    AfterQuestion,
    /// The image, then the question: `t2v_metrics`' local models' prompts.
    BeforeQuestion,
}

impl ImagePosition {
    /// The names the command line and run specs use, in the order of the variants.
    pub const NAMES: [&'static str; 2] = ["after-question", "before-question"];

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

impl std::str::FromStr for ImagePosition {
    type Err = Error;

    fn from_str(name: &str) -> Result<Self> {
        by_name(name, [ImagePosition::AfterQuestion, ImagePosition::BeforeQuestion], Self::NAMES, "image position")
    }
}

/// The longest wait between two attempts, also the cap on a server's `Retry-After`.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The largest answer read: a one-token completion with its log-probabilities is a few kB.
const MAX_ANSWER_BYTES: u64 = 4 << 20;

impl EndpointSettings {
    /// Settings for `url` and `served_model` with the defaults: `t2v_metrics`' 2 top
    /// log-probabilities, 10 s to connect, 300 s per answer, 5 retries from 1 s.
    pub fn new(url: &str, served_model: &str) -> Self {
        Self {
            url: url.to_string(),
            served_model: served_model.to_string(),
            api_key: None,
            top_logprobs: 2,
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(300),
            retries: 5,
            backoff: Duration::from_secs(1),
            image_position: ImagePosition::AfterQuestion,
            answer_rule: AnswerRule::Logprobs,
            reply_reading: ReplyReading::FirstFound,
        }
    }
}

/// An image as sent: the data URI of its bytes, encoded once however many captions it is
/// asked with; or several images shown together in one prompt, each its own part, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImagePayload {
    data_uris: Vec<String>,
}

impl ImagePayload {
    /// The bytes of an image file as they are, typed by their signature; `None` for a format
    /// a server cannot be expected to read (it is then sent as PNG by the caller).
    pub fn of_file_bytes(bytes: &[u8]) -> Option<Self> {
        let media_type = match bytes {
            [0xFF, 0xD8, 0xFF, ..] => "image/jpeg",
            [0x89, b'P', b'N', b'G', ..] => "image/png",
            [b'R', b'I', b'F', b'F', _, _, _, _, b'W', b'E', b'B', b'P', ..] => "image/webp",
            [b'G', b'I', b'F', b'8', ..] => "image/gif",
            _ => return None,
        };
        Some(Self::new(media_type, bytes))
    }

    /// PNG bytes benchctl encoded.
    pub fn png(bytes: &[u8]) -> Self {
        Self::new("image/png", bytes)
    }

    /// Several images shown together, in order.
    pub fn together(images: impl IntoIterator<Item = ImagePayload>) -> Self {
        Self { data_uris: images.into_iter().flat_map(|image| image.data_uris).collect() }
    }

    fn new(media_type: &str, bytes: &[u8]) -> Self {
        let data_uri = format!("data:{media_type};base64,{}", base64::engine::general_purpose::STANDARD.encode(bytes));
        Self { data_uris: vec![data_uri] }
    }

    /// Each image's data URI, in order (one for a single image).
    pub fn data_uris(&self) -> &[String] {
        &self.data_uris
    }
}

/// One pair's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Asked {
    pub reading: Reading,
    /// Requests made for it (1 without retries).
    pub attempts: u32,
    /// The reply the reading was read from ([`AnswerRule::Generate`]; `None` otherwise).
    pub reply: Option<String>,
}

/// One request's answer read for each of several answers (a question's options).
#[derive(Debug, Clone, PartialEq)]
pub struct AskedOptions {
    /// One reading per answer asked about, in order.
    pub readings: Vec<Reading>,
    /// Requests made (1 without retries).
    pub attempts: u32,
    /// The generated reply every reading was read from ([`AnswerRule::Generate`]; `None`
    /// otherwise).
    pub reply: Option<String>,
}

/// A chat-completions server asked for VQAScores.
pub struct Endpoint {
    agent: ureq::Agent,
    chat_url: Url,
    settings: EndpointSettings,
    template: Template,
}

fn failed(message: String) -> Error {
    Error::new(ErrorKind::Endpoint, message)
}

/// The answer's parts benchctl reads (`choices[0].logprobs.content[0].top_logprobs`).
#[derive(Deserialize)]
struct Completion {
    choices: Vec<Choice>,
}

#[derive(Deserialize)]
struct Choice {
    logprobs: Option<ChoiceLogprobs>,
    #[serde(default)]
    message: Option<ChoiceMessage>,
}

#[derive(Deserialize)]
struct ChoiceMessage {
    #[serde(default)]
    content: Option<String>,
}

#[derive(Deserialize)]
struct ChoiceLogprobs {
    content: Option<Vec<TokenLogprob>>,
}

#[derive(Deserialize)]
struct TokenLogprob {
    #[serde(default)]
    top_logprobs: Vec<TopLogprob>,
}

#[derive(Deserialize)]
struct TopLogprob {
    token: String,
    logprob: f64,
}

/// What one attempt came to.
enum Attempt {
    /// Each option's reading, and the generated reply they were read from (if generated).
    Answered(Vec<Reading>, Option<String>),
    /// Worth another attempt after a wait (the server's `Retry-After`, if it gave one).
    Retry(String, Option<Duration>),
    Fatal(Error),
}

impl Endpoint {
    pub fn new(settings: EndpointSettings, template: Template) -> Result<Self> {
        let base =
            Url::parse(&settings.url).map_err(|e| failed(format!("use the endpoint {:?}: {e}", settings.url)))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(failed(format!("use the endpoint {base}: only http and https are supported")));
        }
        let chat_url = if base.path().trim_end_matches('/').ends_with("/chat/completions") {
            base
        } else {
            let joined = format!("{}/chat/completions", base.as_str().trim_end_matches('/'));
            Url::parse(&joined).map_err(|e| failed(format!("use the endpoint {joined:?}: {e}")))?
        };
        if settings.served_model.trim().is_empty() {
            return Err(failed(format!("use the endpoint {chat_url}: --served-model names no model")));
        }
        if settings.top_logprobs == 0 {
            return Err(failed(format!("use the endpoint {chat_url}: top_logprobs must be at least 1")));
        }
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(settings.connect_timeout)
            // One deadline for the whole request: each read and write waits only what is left
            // of it, so an answer dripped a byte at a time cannot outlast it.
            .timeout(settings.request_timeout)
            // A chat-completions server answers in place; a redirect is not followed with the key.
            .redirects(0)
            .user_agent(concat!("benchctl/", env!("CARGO_PKG_VERSION")))
            .build();
        Ok(Self { agent, chat_url, settings, template })
    }

    /// The chat-completions URL and served model, as errors and records name the server.
    pub fn name(&self) -> String {
        format!("{} (model {:?})", self.chat_url, self.settings.served_model)
    }

    pub fn chat_url(&self) -> &Url {
        &self.chat_url
    }

    pub fn settings(&self) -> &EndpointSettings {
        &self.settings
    }

    pub fn template(&self) -> &Template {
        &self.template
    }

    /// The request body for one pair.
    pub fn request_body(&self, image: &ImagePayload, caption: &str) -> String {
        let question = serde_json::json!({"type": "text", "text": self.template.question_for(caption)});
        let images =
            image.data_uris().iter().map(|uri| serde_json::json!({"type": "image_url", "image_url": {"url": uri}}));
        // Images shown together stay together, in order, where one image would be.
        let content: Vec<serde_json::Value> = match self.settings.image_position {
            ImagePosition::AfterQuestion => std::iter::once(question).chain(images).collect(),
            ImagePosition::BeforeQuestion => images.chain(std::iter::once(question)).collect(),
        };
        match self.settings.answer_rule {
            AnswerRule::Logprobs => serde_json::json!({
                "model": self.settings.served_model,
                "messages": [{"role": "user", "content": content}],
                "max_tokens": 1,
                "logprobs": true,
                "top_logprobs": self.settings.top_logprobs,
            }),
            AnswerRule::Generate => serde_json::json!({
                "model": self.settings.served_model,
                "messages": [{"role": "user", "content": content}],
                "max_tokens": GENERATED_TOKENS,
                "temperature": 0,
            }),
        }
        .to_string()
    }

    /// Asks for one pair's score, retrying what is worth retrying.
    pub fn ask(&self, image: &ImagePayload, caption: &str) -> Result<Asked> {
        let asked = self.ask_options(image, caption, &[caption])?;
        let reading = asked.readings.first().copied().unwrap_or(Reading::Neither);
        Ok(Asked { reading, attempts: asked.attempts, reply: asked.reply })
    }

    /// Asks `caption`'s question once and reads the answer of each of `texts` from the one
    /// reply: texts that ask the same question with different answer options (a question's
    /// options: the first token's top log-probabilities, or the generated reply, hold them
    /// all), so a question of two options is one request.
    pub fn ask_options(&self, image: &ImagePayload, caption: &str, texts: &[&str]) -> Result<AskedOptions> {
        let body = self.request_body(image, caption);
        let answers: Vec<String> = texts.iter().map(|t| self.template.answer_for(t)).collect();
        let mut attempts = 0;
        loop {
            attempts += 1;
            match self.attempt(&body, &answers) {
                Attempt::Answered(readings, reply) => return Ok(AskedOptions { readings, attempts, reply }),
                Attempt::Fatal(e) => return Err(e),
                Attempt::Retry(why, _) if attempts > self.settings.retries => {
                    return Err(failed(format!("ask {}: {why} ({attempts} attempts)", self.name())))
                }
                Attempt::Retry(_, after) => {
                    let doubling = self.settings.backoff.saturating_mul(1 << (attempts - 1).min(16));
                    std::thread::sleep(after.unwrap_or(doubling).min(MAX_BACKOFF));
                }
            }
        }
    }

    fn attempt(&self, body: &str, answers: &[String]) -> Attempt {
        let mut request = self.agent.request_url("POST", &self.chat_url).set("Content-Type", "application/json");
        if let Some(key) = &self.settings.api_key {
            request = request.set("Authorization", &format!("Bearer {key}"));
        }
        let response = match request.send_string(body) {
            Ok(response) if (300..400).contains(&response.status()) => {
                let to = response.header("Location").unwrap_or("nowhere said").to_string();
                let why = format!(
                    "the server redirected ({} to {}), and redirects are not followed (the request carries the API key): give --endpoint the address it redirects to",
                    response.status(),
                    self.redact(&to)
                );
                return Attempt::Fatal(failed(format!("ask {}: {why}", self.name())));
            }
            Ok(response) => response,
            Err(ureq::Error::Status(code, response)) => {
                let retry_after =
                    response.header("Retry-After").and_then(|s| s.trim().parse::<u64>().ok()).map(Duration::from_secs);
                let text = match read_limited(response) {
                    Ok(text) | Err(Unread::BrokeOff(text)) | Err(Unread::TooLong(text)) => text,
                };
                let why = format!("the server answered {code}: {}", self.redact(&excerpt(&text)));
                return match code {
                    408 | 429 | 500 | 502 | 503 | 504 => Attempt::Retry(why, retry_after),
                    _ => Attempt::Fatal(failed(format!("ask {}: {why}", self.name()))),
                };
            }
            Err(ureq::Error::Transport(t)) => return Attempt::Retry(self.redact(&transport_text(&t)), None),
        };
        let text = match read_limited(response) {
            Ok(text) => text,
            Err(Unread::BrokeOff(why)) => return Attempt::Retry(self.redact(&why), None),
            // The same request would get the same answer: not retried.
            Err(Unread::TooLong(why)) => {
                return Attempt::Fatal(failed(format!("read the answer of {}: {why}", self.name())))
            }
        };
        // One answer read for every option asked about it.
        let read = completion(&text).and_then(|completion| match self.settings.answer_rule {
            AnswerRule::Logprobs => {
                let readings = answers.iter().map(|answer| logprobs_reading(&completion, answer));
                Ok((readings.collect::<std::result::Result<Vec<Reading>, String>>()?, None))
            }
            AnswerRule::Generate => {
                let reply = generated_reply(&completion)?;
                let reading = |answer: &String| reply_reading(reply, answer, self.settings.reply_reading);
                Ok((answers.iter().map(reading).collect(), Some(reply.to_string())))
            }
        });
        match read {
            Ok((readings, reply)) => Attempt::Answered(readings, reply),
            Err(why) => Attempt::Fatal(failed(format!("read the answer of {}: {}", self.name(), self.redact(&why)))),
        }
    }

    /// `text` with the API key, and any `Bearer` token, replaced by `[redacted]`: a server may
    /// quote the request's headers back.
    fn redact(&self, text: &str) -> String {
        let mut text = match self.settings.api_key.as_deref().filter(|k| !k.is_empty()) {
            Some(key) => text.replace(key, "[redacted]"),
            None => text.to_string(),
        };
        let mut at = 0;
        while let Some(found) = text[at..].find("Bearer ") {
            let start = at + found + "Bearer ".len();
            let end = text[start..]
                .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ',' | '}'))
                .map_or(text.len(), |e| start + e);
            text.replace_range(start..end, "[redacted]");
            at = start + "[redacted]".len();
        }
        text
    }
}

/// The score in a chat-completions answer's first token, or why there is none.
pub fn parse_answer(text: &str, answer: &str) -> std::result::Result<Reading, String> {
    logprobs_reading(&completion(text)?, answer)
}

/// A server's answer as a chat completion, or why it is none.
fn completion(text: &str) -> std::result::Result<Completion, String> {
    serde_json::from_str(text).map_err(|e| format!("it is not a chat completion ({e}): {}", excerpt(text)))
}

/// The score of `answer` in a completion's first token's top log-probabilities.
fn logprobs_reading(completion: &Completion, answer: &str) -> std::result::Result<Reading, String> {
    let choice = completion.choices.first().ok_or("it has no choices")?;
    let no_logprobs = "it has no log-probabilities (the server must support `logprobs` and `top_logprobs` in chat completions, as vLLM, SGLang and llama.cpp's server do)";
    let tokens = choice.logprobs.as_ref().and_then(|l| l.content.as_ref()).ok_or(no_logprobs)?;
    let first = tokens.first().ok_or(no_logprobs)?;
    if first.top_logprobs.is_empty() {
        return Err(no_logprobs.into());
    }
    if let Some(bad) = first.top_logprobs.iter().find(|t| t.logprob.is_nan() || t.logprob > 1e-6) {
        return Err(format!(
            "the token {:?} has the log-probability {}, not a log of a probability",
            bad.token, bad.logprob
        ));
    }
    Ok(read_top_logprobs(first.top_logprobs.iter().map(|t| (t.token.as_str(), t.logprob)), answer))
}

/// The score in a chat-completions answer's generated reply ([`AnswerRule::Generate`]), read
/// for `answer` as `reading` reads replies.
pub fn parse_generated(text: &str, answer: &str, reading: ReplyReading) -> std::result::Result<Reading, String> {
    generated_reading(&completion(text)?, answer, reading)
}

/// The score of `answer` in a completion's generated reply, read as `reading` reads replies.
fn generated_reading(
    completion: &Completion,
    answer: &str,
    reading: ReplyReading,
) -> std::result::Result<Reading, String> {
    Ok(reply_reading(generated_reply(completion)?, answer, reading))
}

/// A completion's generated reply, or why it has none.
fn generated_reply(completion: &Completion) -> std::result::Result<&str, String> {
    let choice = completion.choices.first().ok_or("it has no choices")?;
    Ok(choice.message.as_ref().and_then(|m| m.content.as_deref()).ok_or("it has no message content")?)
}

/// The score of `answer` in `reply`: 0 where `reading` finds it there, probability 0 where not.
fn reply_reading(reply: &str, answer: &str, reading: ReplyReading) -> Reading {
    if super::reply::names(reading, reply, answer) {
        Reading::Answer(0.0)
    } else {
        Reading::Neither
    }
}

/// Why an answer was not read whole.
enum Unread {
    /// The connection broke or the deadline passed (worth another attempt).
    BrokeOff(String),
    /// Longer than [`MAX_ANSWER_BYTES`] (a retry would get the same).
    TooLong(String),
}

fn read_limited(response: ureq::Response) -> std::result::Result<String, Unread> {
    let mut bytes = Vec::new();
    response
        .into_reader()
        .take(MAX_ANSWER_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Unread::BrokeOff(format!("the answer broke off or timed out: {e}")))?;
    if bytes.len() as u64 > MAX_ANSWER_BYTES {
        return Err(Unread::TooLong(format!("the answer is longer than {MAX_ANSWER_BYTES} bytes")));
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The start of a server's text, on one line.
fn excerpt(text: &str) -> String {
    let line: String = text.chars().take(300).map(|c| if c.is_control() { ' ' } else { c }).collect();
    if text.chars().count() > 300 {
        format!("{line}…")
    } else {
        line
    }
}

fn transport_text(t: &ureq::Transport) -> String {
    match t.kind() {
        ureq::ErrorKind::Io => format!("the connection failed or timed out ({t})"),
        _ => format!("{t}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_or_refused_with_their_reason() {
        let ok = r#"{"choices":[{"logprobs":{"content":[{"token":"Yes","logprob":-0.1,"top_logprobs":[{"token":"Yes","logprob":-0.1},{"token":"No","logprob":-2.4}]}]}}]}"#;
        assert_eq!(parse_answer(ok, "Yes"), Ok(Reading::Answer(-0.1)));
        let none = r#"{"choices":[{"message":{"content":"Yes"},"logprobs":null}]}"#;
        assert!(parse_answer(none, "Yes").is_err_and(|e| e.contains("no log-probabilities")));
        assert!(parse_answer("<html>busy</html>", "Yes").is_err_and(|e| e.contains("not a chat completion")));
        assert!(parse_answer(r#"{"choices":[]}"#, "Yes").is_err_and(|e| e.contains("no choices")));
        let positive = ok.replace("-0.1}", "0.5}");
        assert!(parse_answer(&positive, "Yes").is_err_and(|e| e.contains("not a log")));
    }

    #[test]
    fn the_image_goes_after_or_before_the_question() -> Result<()> {
        let image = ImagePayload::png(b"png");
        let mut settings = EndpointSettings::new("http://h/v1", "m");
        let types = |settings: &EndpointSettings| -> Result<Vec<String>> {
            let body = Endpoint::new(settings.clone(), Template::t2v_metrics())?.request_body(&image, "a dog");
            let body: serde_json::Value =
                serde_json::from_str(&body).map_err(|e| Error::new(ErrorKind::Endpoint, e.to_string()))?;
            let content = body["messages"][0]["content"].as_array().cloned().unwrap_or_default();
            Ok(content.iter().map(|c| c["type"].as_str().unwrap_or_default().to_string()).collect())
        };
        assert_eq!(types(&settings)?, ["text", "image_url"], "t2v_metrics' API models' order by default");
        settings.image_position = "before-question".parse()?;
        assert_eq!(types(&settings)?, ["image_url", "text"]);
        assert!("after".parse::<ImagePosition>().is_err());
        Ok(())
    }

    #[test]
    fn the_chat_url_follows_from_the_base() -> Result<()> {
        let t = Template::t2v_metrics();
        let e = Endpoint::new(EndpointSettings::new("http://h:8000/v1/", "m"), t.clone())?;
        assert_eq!(e.chat_url().as_str(), "http://h:8000/v1/chat/completions");
        let e = Endpoint::new(EndpointSettings::new("https://h/v1/chat/completions", "m"), t.clone())?;
        assert_eq!(e.chat_url().as_str(), "https://h/v1/chat/completions");
        assert!(Endpoint::new(EndpointSettings::new("file:///x", "m"), t.clone()).is_err());
        assert!(Endpoint::new(EndpointSettings::new("http://h/v1", " "), t).is_err());
        Ok(())
    }
}

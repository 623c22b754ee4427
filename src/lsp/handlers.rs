//! One function per request: parameters in, `envc_ide` asked, the answer in the protocol's
//! shapes.

use std::collections::HashMap;
use std::path::PathBuf;

use lsp_types::*;
use serde_json::Value;

use envc_ide::{CompletionKind, Snapshot};
use envc_lang::{FileId, Span};

use super::{convert, to_value, Files, RequestError, Server};

pub fn capabilities() -> Value {
    to_value(ServerCapabilities {
        text_document_sync: Some(TextDocumentSyncCapability::Options(
            TextDocumentSyncOptions {
                open_close: Some(true),
                change: Some(TextDocumentSyncKind::INCREMENTAL),
                save: Some(TextDocumentSyncSaveOptions::Supported(true)),
                ..Default::default()
            },
        )),
        hover_provider: Some(HoverProviderCapability::Simple(true)),
        definition_provider: Some(OneOf::Left(true)),
        references_provider: Some(OneOf::Left(true)),
        completion_provider: Some(CompletionOptions {
            trigger_characters: Some(vec![".".into(), "(".into(), "\"".into(), "/".into()]),
            ..Default::default()
        }),
        document_formatting_provider: Some(OneOf::Left(true)),
        document_symbol_provider: Some(OneOf::Left(true)),
        rename_provider: Some(OneOf::Right(RenameOptions {
            prepare_provider: Some(false),
            work_done_progress_options: Default::default(),
        })),
        code_action_provider: Some(CodeActionProviderCapability::Options(CodeActionOptions {
            code_action_kinds: Some(vec![CodeActionKind::QUICKFIX]),
            ..Default::default()
        })),
        ..Default::default()
    })
}

/// The request's answer, `null` where there is none (a position with nothing to say).
// `WorkspaceEdit` keys its changes by `Uri`, which clippy takes for mutable (a cache inside
// fluent-uri); it is never changed while in the map.
#[allow(clippy::mutable_key_type)]
pub fn handle(server: &mut Server, method: &str, params: Value) -> Result<Value, RequestError> {
    use lsp_types::request::*;
    match method {
        HoverRequest::METHOD => {
            let p: HoverParams = parse(params)?;
            let at = At::new(server, &p.text_document_position_params)?;
            Ok(at.with(|s, f, o, _| {
                s.hover(f, o).map(|h| Hover {
                    contents: HoverContents::Markup(MarkupContent {
                        kind: MarkupKind::Markdown,
                        value: h.text,
                    }),
                    range: Some(convert::range(text(s, f), h.span)),
                })
            }))
        }
        GotoDefinition::METHOD => {
            let p: GotoDefinitionParams = parse(params)?;
            let at = At::new(server, &p.text_document_position_params)?;
            Ok(at.with(|s, f, o, files| {
                let (file, span) = s.definition(f, o)?;
                location(s, files, file, span).map(GotoDefinitionResponse::Scalar)
            }))
        }
        References::METHOD => {
            let p: ReferenceParams = parse(params)?;
            let at = At::new(server, &p.text_document_position)?;
            Ok(at.with(|s, f, o, files| {
                let found = s.references(f, o, p.context.include_declaration);
                Some(
                    found
                        .into_iter()
                        .filter_map(|(file, span)| location(s, files, file, span))
                        .collect::<Vec<_>>(),
                )
            }))
        }
        Completion::METHOD => {
            let p: CompletionParams = parse(params)?;
            let at = At::new(server, &p.text_document_position)?;
            Ok(at.with(|s, f, o, _| {
                let items: Vec<CompletionItem> = s
                    .completions(f, o)
                    .into_iter()
                    .map(|c| CompletionItem {
                        kind: Some(completion_kind(c.kind)),
                        detail: (!c.detail.is_empty()).then(|| c.detail.clone()),
                        documentation: (!c.doc.is_empty()).then(|| {
                            Documentation::MarkupContent(MarkupContent {
                                kind: MarkupKind::Markdown,
                                value: c.doc.clone(),
                            })
                        }),
                        insert_text: c.insert.clone(),
                        label: c.label,
                        ..Default::default()
                    })
                    .collect();
                Some(CompletionResponse::Array(items))
            }))
        }
        Formatting::METHOD => {
            let p: DocumentFormattingParams = parse(params)?;
            let path = doc_path(server, &p.text_document.uri)?;
            let text = &server.docs[&path];
            Ok(to_value(envc_ide::format(text).filter(|f| f != text).map(
                |formatted| {
                    vec![TextEdit {
                        range: convert::range(text, Span::new(0, text.len())),
                        new_text: formatted,
                    }]
                },
            )))
        }
        DocumentSymbolRequest::METHOD => {
            let p: DocumentSymbolParams = parse(params)?;
            let path = doc_path(server, &p.text_document.uri)?;
            Ok(with_root(server, &path, |s, f, _| {
                let t = text(s, f);
                #[allow(deprecated)] // `deprecated` is a field every DocumentSymbol must have
                let symbols: Vec<DocumentSymbol> = s
                    .symbols(f)
                    .into_iter()
                    .map(|sy| DocumentSymbol {
                        name: sy.name,
                        detail: (!sy.detail.is_empty()).then_some(sy.detail),
                        kind: symbol_kind(sy.kind),
                        tags: None,
                        deprecated: None,
                        range: convert::range(t, sy.span),
                        selection_range: convert::range(t, sy.name_span),
                        children: None,
                    })
                    .collect();
                Some(DocumentSymbolResponse::Nested(symbols))
            }))
        }
        Rename::METHOD => {
            let p: RenameParams = parse(params)?;
            let at = At::new(server, &p.text_document_position)?;
            at.with_result(|s, f, o, files| {
                let edits = s
                    .rename(f, o, &p.new_name)
                    .map_err(|e| RequestError::Refused(e.to_string()))?;
                let mut changes: HashMap<Uri, Vec<TextEdit>> = HashMap::new();
                for e in edits {
                    let Some(uri) = files.uri(&s.sources().get(e.file).name) else {
                        continue;
                    };
                    changes.entry(uri).or_default().push(TextEdit {
                        range: convert::range(text(s, e.file), e.span),
                        new_text: e.text,
                    });
                }
                Ok(to_value(WorkspaceEdit {
                    changes: Some(changes),
                    ..Default::default()
                }))
            })
        }
        CodeActionRequest::METHOD => {
            let p: CodeActionParams = parse(params)?;
            let path = doc_path(server, &p.text_document.uri)?;
            let uri = p.text_document.uri.clone();
            Ok(with_root(server, &path, |s, f, files| {
                let range = convert::span(text(s, f), p.range);
                let actions: Vec<CodeActionOrCommand> = s
                    .fixes(f, range)
                    .into_iter()
                    .map(|fix| {
                        let edit = TextEdit {
                            range: convert::range(text(s, f), fix.edit.span),
                            new_text: fix.edit.text,
                        };
                        CodeActionOrCommand::CodeAction(CodeAction {
                            title: fix.title,
                            kind: Some(CodeActionKind::QUICKFIX),
                            diagnostics: Some(vec![diagnostic(
                                s,
                                &s.diagnostics()[fix.diagnostic],
                                files,
                                false,
                            )]),
                            edit: Some(WorkspaceEdit {
                                changes: Some(HashMap::from([(uri.clone(), vec![edit])])),
                                ..Default::default()
                            }),
                            is_preferred: Some(true),
                            ..Default::default()
                        })
                    })
                    .collect();
                Some(actions)
            }))
        }
        _ => Err(RequestError::Unknown),
    }
}

fn parse<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, RequestError> {
    serde_json::from_value(params).map_err(|e| RequestError::Params(e.to_string()))
}

fn text(s: &Snapshot, f: FileId) -> &str {
    &s.sources().get(f).text
}

fn doc_path(server: &Server, uri: &Uri) -> Result<PathBuf, RequestError> {
    let path = convert::path(uri)
        .ok_or_else(|| RequestError::Params(format!("not a file: URI: {}", uri.as_str())))?;
    if !server.docs.contains_key(&path) {
        return Err(RequestError::Params(format!(
            "{} is not open",
            path.display()
        )));
    }
    Ok(path)
}

/// Runs `f` on the analysis of the open document at `path`, with its file id.
fn with_root<T: serde::Serialize>(
    server: &mut Server,
    path: &std::path::Path,
    f: impl FnOnce(&Snapshot, FileId, &Files) -> Option<T>,
) -> Value {
    server.analyse(path);
    let std_dir = server.std_dir.clone();
    let Some(s) = server.snapshots.get(path) else {
        return Value::Null;
    };
    let (_, name) = envc_executor::split_root(path);
    let Some(file) = s.file(&name) else {
        return Value::Null;
    };
    let files = Files {
        root: path,
        std_dir: std_dir.as_deref(),
    };
    to_value(f(s, file, &files))
}

/// A position in an open document.
struct At<'s> {
    server: &'s mut Server,
    path: PathBuf,
    position: Position,
}

impl<'s> At<'s> {
    fn new(server: &'s mut Server, p: &TextDocumentPositionParams) -> Result<At<'s>, RequestError> {
        let path = doc_path(server, &p.text_document.uri)?;
        Ok(At {
            server,
            path,
            position: p.position,
        })
    }

    fn with<T: serde::Serialize>(
        self,
        f: impl FnOnce(&Snapshot, FileId, u32, &Files) -> Option<T>,
    ) -> Value {
        let position = self.position;
        with_root(self.server, &self.path, |s, file, files| {
            f(s, file, convert::offset(text(s, file), position), files)
        })
    }

    fn with_result(
        self,
        f: impl FnOnce(&Snapshot, FileId, u32, &Files) -> Result<Value, RequestError>,
    ) -> Result<Value, RequestError> {
        let mut out = Ok(Value::Null);
        let position = self.position;
        with_root(self.server, &self.path, |s, file, files| {
            out = f(s, file, convert::offset(text(s, file), position), files);
            None::<()>
        });
        out
    }
}

fn location(s: &Snapshot, files: &Files, file: FileId, span: Span) -> Option<Location> {
    Some(Location {
        uri: files.uri(&s.sources().get(file).name)?,
        range: convert::range(text(s, file), span),
    })
}

/// The diagnostic as `envc check` says it: the title, its note and its help in the message,
/// the primary label's text with it, and the other labels as related places.
pub fn diagnostic(
    s: &Snapshot,
    d: &envc_lang::Diagnostic,
    files: &Files,
    warning: bool,
) -> Diagnostic {
    let primary = d.labels.first();
    let range = primary
        .map(|l| convert::range(text(s, l.file), l.span))
        .unwrap_or_default();
    let mut message = d.title.clone();
    if let Some(l) = primary.filter(|l| !l.text.is_empty()) {
        message.push_str(&format!(": {}", l.text));
    }
    if !d.message.is_empty() {
        message.push_str(&format!("\n{}", d.message));
    }
    if let Some(h) = &d.help {
        message.push_str(&format!("\nhelp: {h}"));
    }
    let related: Vec<DiagnosticRelatedInformation> = d
        .labels
        .iter()
        .skip(1)
        .filter_map(|l| {
            Some(DiagnosticRelatedInformation {
                location: location(s, files, l.file, l.span)?,
                message: l.text.clone(),
            })
        })
        .collect();
    Diagnostic {
        range,
        severity: Some(if warning {
            DiagnosticSeverity::WARNING
        } else {
            DiagnosticSeverity::ERROR
        }),
        code: Some(NumberOrString::String(d.code.to_string())),
        source: Some("envc".into()),
        message,
        related_information: (!related.is_empty()).then_some(related),
        ..Default::default()
    }
}

fn completion_kind(k: CompletionKind) -> CompletionItemKind {
    match k {
        CompletionKind::Local => CompletionItemKind::VARIABLE,
        CompletionKind::Value => CompletionItemKind::CONSTANT,
        CompletionKind::Function => CompletionItemKind::FUNCTION,
        CompletionKind::Field => CompletionItemKind::FIELD,
        CompletionKind::Argument => CompletionItemKind::PROPERTY,
        CompletionKind::Module => CompletionItemKind::MODULE,
        CompletionKind::Type => CompletionItemKind::TYPE_PARAMETER,
        CompletionKind::Keyword => CompletionItemKind::KEYWORD,
    }
}

fn symbol_kind(k: envc_ide::SymbolKind) -> SymbolKind {
    use envc_ide::SymbolKind as S;
    match k {
        S::Import => SymbolKind::MODULE,
        S::Value => SymbolKind::VARIABLE,
        S::Node => SymbolKind::OBJECT,
        S::Function => SymbolKind::FUNCTION,
        S::Param => SymbolKind::CONSTANT,
        S::Type => SymbolKind::STRUCT,
        S::Output => SymbolKind::PROPERTY,
        S::Policy => SymbolKind::EVENT,
        S::Rollout => SymbolKind::ARRAY,
    }
}

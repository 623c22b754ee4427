//! EC2's answers as a small element tree: local names, text, children. The answers are small
//! (a page of instances), and reading a tree keeps each call's extraction a few lines.

use quick_xml::events::Event;
use quick_xml::Reader;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Element {
    pub name: String,
    pub text: String,
    pub children: Vec<Element>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct XmlError(pub String);

impl Element {
    pub fn parse(text: &str) -> Result<Element, XmlError> {
        let mut reader = Reader::from_str(text);
        let mut stack: Vec<Element> = vec![Element::default()];
        loop {
            let event = reader
                .read_event()
                .map_err(|e| XmlError(format!("at byte {}: {e}", reader.buffer_position())))?;
            match event {
                Event::Start(start) => stack.push(Element {
                    name: local(start.local_name().as_ref()),
                    ..Element::default()
                }),
                Event::Empty(start) => {
                    let element = Element {
                        name: local(start.local_name().as_ref()),
                        ..Element::default()
                    };
                    if let Some(parent) = stack.last_mut() {
                        parent.children.push(element);
                    }
                }
                Event::End(_) => {
                    let done = stack.pop();
                    match (done, stack.last_mut()) {
                        (Some(done), Some(parent)) => parent.children.push(done),
                        _ => return Err(XmlError("an end tag with no start".into())),
                    }
                }
                Event::Text(t) => {
                    let t = t.decode().map_err(|e| XmlError(e.to_string()))?;
                    if let Some(top) = stack.last_mut() {
                        top.text.push_str(&t);
                    }
                }
                Event::CData(t) => {
                    let t = t.decode().map_err(|e| XmlError(e.to_string()))?;
                    if let Some(top) = stack.last_mut() {
                        top.text.push_str(&t);
                    }
                }
                Event::GeneralRef(r) => {
                    let c = match r.resolve_char_ref().map_err(|e| XmlError(e.to_string()))? {
                        Some(c) => c,
                        None => {
                            let name = r.decode().map_err(|e| XmlError(e.to_string()))?;
                            match name.as_ref() {
                                "lt" => '<',
                                "gt" => '>',
                                "amp" => '&',
                                "quot" => '"',
                                "apos" => '\'',
                                other => return Err(XmlError(format!("unknown entity &{other};"))),
                            }
                        }
                    };
                    if let Some(top) = stack.last_mut() {
                        top.text.push(c);
                    }
                }
                Event::Eof => break,
                Event::Comment(_) | Event::Decl(_) | Event::PI(_) | Event::DocType(_) => {}
            }
        }
        if stack.len() != 1 {
            return Err(XmlError("the document ends inside an element".into()));
        }
        stack
            .pop()
            .and_then(|doc| doc.children.into_iter().next())
            .ok_or_else(|| XmlError("no root element".into()))
    }

    pub fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    /// The trimmed text of a child, `None` when absent or empty.
    pub fn text_of(&self, name: &str) -> Option<String> {
        self.child(name)
            .map(|c| c.text.trim().to_string())
            .filter(|t| !t.is_empty())
    }

    /// The `<item>`s of a set child (`<instancesSet><item>…`), none when the set is absent.
    pub fn items<'a>(&'a self, set: &str) -> impl Iterator<Item = &'a Element> + 'a {
        self.child(set)
            .into_iter()
            .flat_map(|s| s.children.iter().filter(|c| c.name == "item"))
    }

    /// The first element of that name at any depth, this one included.
    pub fn find(&self, name: &str) -> Option<&Element> {
        if self.name == name {
            return Some(self);
        }
        self.children.iter().find_map(|c| c.find(name))
    }
}

fn local(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_tree() {
        let doc = Element::parse(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeVpcsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <requestId>r-1</requestId>
  <vpcSet><item><vpcId>vpc-1</vpcId><tagSet><item><key>a&amp;b</key><value>&#x3c;x&gt;</value></item></tagSet></item>
  <item><vpcId>vpc-2</vpcId><tagSet/></item></vpcSet>
</DescribeVpcsResponse>"#,
        )
        .unwrap();
        assert_eq!(doc.name, "DescribeVpcsResponse");
        assert_eq!(doc.text_of("requestId").as_deref(), Some("r-1"));
        let vpcs: Vec<_> = doc.items("vpcSet").collect();
        assert_eq!(vpcs.len(), 2);
        let tag = vpcs[0].items("tagSet").next().unwrap();
        assert_eq!(tag.text_of("key").as_deref(), Some("a&b"));
        assert_eq!(tag.text_of("value").as_deref(), Some("<x>"));
        assert_eq!(vpcs[1].items("tagSet").count(), 0);
        assert!(Element::parse("<a><b></a>").is_err());
        assert!(Element::parse("not xml").is_err());
    }
}

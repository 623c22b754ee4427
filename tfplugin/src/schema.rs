//! A provider's schema as envc reads it: its configuration, its resource types and data
//! sources, each a block of typed attributes and nested blocks. Built from
//! GetProviderSchema's answer; the answer's own bytes are what a cache keeps
//! ([`ProviderSchema::decode`]), so a schema read offline is the one the provider gave.

use std::collections::BTreeMap;

use prost::Message;

use crate::cty::{ObjectType, Type, Value};
use crate::diagnostic::Diagnostic;
use crate::error::ValueError;
use crate::wire;

#[derive(Clone, Debug, PartialEq)]
pub struct ProviderSchema {
    pub provider: Schema,
    pub resources: BTreeMap<String, Schema>,
    pub data_sources: BTreeMap<String, Schema>,
    pub diagnostics: Vec<Diagnostic>,
    /// The provider wants PlanResourceChange called for a destroy too.
    pub plan_destroy: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Schema {
    /// The state's schema version: a state written under an older one is upgraded.
    pub version: i64,
    pub block: Block,
}

#[derive(Clone, Debug, PartialEq, Default)]
pub struct Block {
    pub attributes: BTreeMap<String, Attribute>,
    pub blocks: BTreeMap<String, NestedBlock>,
    pub description: String,
    pub deprecated: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Attribute {
    /// The attribute's whole type, nested attributes included.
    pub ty: Type,
    /// Protocol 6's nested attributes, kept as attributes so that `check` can say which
    /// of them is required.
    pub nested: Option<NestedAttributes>,
    pub required: bool,
    pub optional: bool,
    pub computed: bool,
    pub sensitive: bool,
    pub deprecated: bool,
    pub write_only: bool,
    pub description: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct NestedAttributes {
    pub nesting: Nesting,
    pub attributes: BTreeMap<String, Attribute>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nesting {
    Single,
    /// Like `Single`, but never null: absent, its attributes are all null.
    Group,
    List,
    Set,
    Map,
}

#[derive(Clone, Debug, PartialEq)]
pub struct NestedBlock {
    pub nesting: Nesting,
    pub block: Block,
    pub min_items: i64,
    pub max_items: i64,
}

impl ProviderSchema {
    /// GetProviderSchema's answer, from the bytes it came in.
    pub fn decode(bytes: &[u8]) -> Result<ProviderSchema, ValueError> {
        let response = wire::GetProviderSchemaResponse::decode(bytes)
            .map_err(|e| ValueError::new(format!("a schema that does not decode: {e}")))?;
        ProviderSchema::from_wire(response)
    }

    pub(crate) fn from_wire(
        response: wire::GetProviderSchemaResponse,
    ) -> Result<ProviderSchema, ValueError> {
        let named =
            |map: BTreeMap<String, wire::Schema>| -> Result<BTreeMap<String, Schema>, ValueError> {
                map.into_iter()
                    .map(|(name, s)| {
                        let schema = Schema::from_wire(s)
                            .map_err(|e| ValueError::new(format!("the schema of `{name}`: {e}")))?;
                        Ok((name, schema))
                    })
                    .collect()
            };
        Ok(ProviderSchema {
            provider: match response.provider {
                Some(s) => Schema::from_wire(s).map_err(|e| {
                    ValueError::new(format!("the provider's configuration schema: {e}"))
                })?,
                None => Schema {
                    version: 0,
                    block: Block::default(),
                },
            },
            resources: named(response.resource_schemas)?,
            data_sources: named(response.data_source_schemas)?,
            diagnostics: response
                .diagnostics
                .into_iter()
                .map(Diagnostic::from_wire)
                .collect(),
            plan_destroy: response.server_capabilities.is_some_and(|c| c.plan_destroy),
        })
    }
}

impl Schema {
    fn from_wire(schema: wire::Schema) -> Result<Schema, ValueError> {
        Ok(Schema {
            version: schema.version,
            block: Block::from_wire(schema.block.unwrap_or_default())?,
        })
    }
}

fn nesting(mode: i32) -> Result<Nesting, ValueError> {
    match wire::NestingMode::try_from(mode) {
        Ok(wire::NestingMode::Single) => Ok(Nesting::Single),
        Ok(wire::NestingMode::Group) => Ok(Nesting::Group),
        Ok(wire::NestingMode::List) => Ok(Nesting::List),
        Ok(wire::NestingMode::Set) => Ok(Nesting::Set),
        Ok(wire::NestingMode::Map) => Ok(Nesting::Map),
        _ => Err(ValueError::new(format!(
            "a nesting mode {mode} the protocol does not define"
        ))),
    }
}

impl Nesting {
    /// The type a nested object takes under this nesting.
    fn wrap(self, object: Type) -> Type {
        match self {
            Nesting::Single | Nesting::Group => object,
            Nesting::List => Type::List(Box::new(object)),
            Nesting::Set => Type::Set(Box::new(object)),
            Nesting::Map => Type::Map(Box::new(object)),
        }
    }
}

fn attributes(list: Vec<wire::Attribute>) -> Result<BTreeMap<String, Attribute>, ValueError> {
    list.into_iter()
        .map(|a| {
            let name = a.name.clone();
            let attribute = Attribute::from_wire(a)
                .map_err(|e| ValueError::new(format!("attribute `{name}`: {e}")))?;
            Ok((name, attribute))
        })
        .collect()
}

fn object_type(attributes: &BTreeMap<String, Attribute>) -> ObjectType {
    ObjectType {
        attributes: attributes
            .iter()
            .map(|(k, a)| (k.clone(), a.ty.clone()))
            .collect(),
        optional: Default::default(),
    }
}

impl Attribute {
    fn from_wire(a: wire::Attribute) -> Result<Attribute, ValueError> {
        let (ty, nested) = match a.nested_type {
            Some(object) => {
                let nested = NestedAttributes {
                    nesting: nesting(object.nesting)?,
                    attributes: attributes(object.attributes)?,
                };
                let ty = nested
                    .nesting
                    .wrap(Type::Object(object_type(&nested.attributes)));
                (ty, Some(nested))
            }
            None => (Type::from_json(&a.r#type)?, None),
        };
        Ok(Attribute {
            ty,
            nested,
            required: a.required,
            optional: a.optional,
            computed: a.computed,
            sensitive: a.sensitive,
            deprecated: a.deprecated,
            write_only: a.write_only,
            description: a.description,
        })
    }
}

impl Block {
    fn from_wire(block: wire::Block) -> Result<Block, ValueError> {
        let blocks = block
            .block_types
            .into_iter()
            .map(|b| {
                let name = b.type_name.clone();
                let nested = NestedBlock {
                    nesting: nesting(b.nesting)
                        .map_err(|e| ValueError::new(format!("block `{name}`: {e}")))?,
                    block: Block::from_wire(b.block.unwrap_or_default())
                        .map_err(|e| ValueError::new(format!("block `{name}`: {e}")))?,
                    min_items: b.min_items,
                    max_items: b.max_items,
                };
                Ok((name, nested))
            })
            .collect::<Result<_, ValueError>>()?;
        Ok(Block {
            attributes: attributes(block.attributes)?,
            blocks,
            description: block.description,
            deprecated: block.deprecated,
        })
    }

    /// The object type a value of this block has: its attributes, and each nested block
    /// as an object, or a list, set or map of them.
    pub fn implied_type(&self) -> Type {
        let mut object = object_type(&self.attributes);
        for (name, b) in &self.blocks {
            object
                .attributes
                .insert(name.clone(), b.nesting.wrap(b.block.implied_type()));
        }
        Type::Object(object)
    }

    /// What Terraform calls the proposed new state: the configuration, with each computed
    /// attribute it leaves null kept at its prior value (null on a create, so that the
    /// provider plans it as unknown). Single nested blocks are merged the same way; other
    /// nested blocks are taken from the configuration whole.
    pub fn proposed_new(&self, prior: &Value, config: &Value) -> Value {
        if config == &Value::Null {
            return Value::Null;
        }
        let Value::Object(config_attrs) = config else {
            return config.clone();
        };
        let mut out = config_attrs.clone();
        for (name, attribute) in &self.attributes {
            let configured = config_attrs.get(name).unwrap_or(&Value::Null);
            if attribute.computed && configured == &Value::Null {
                out.insert(name.clone(), prior.attr(name).clone());
            }
        }
        for (name, nested) in &self.blocks {
            if matches!(nested.nesting, Nesting::Single | Nesting::Group) {
                let merged = nested
                    .block
                    .proposed_new(prior.attr(name), config.attr(name));
                out.insert(name.clone(), merged);
            }
        }
        Value::Object(out)
    }

    /// Whether an attribute path names something sensitive: a sensitive attribute, or
    /// anything inside one.
    pub fn is_sensitive(&self, path: &[crate::diagnostic::PathStep]) -> bool {
        use crate::diagnostic::PathStep;
        let mut block = self;
        let mut steps = path.iter();
        while let Some(step) = steps.next() {
            let PathStep::Attribute(name) = step else {
                continue;
            };
            if let Some(a) = block.attributes.get(name) {
                if a.sensitive {
                    return true;
                }
                let mut nested = a.nested.as_ref();
                for step in steps.by_ref() {
                    let Some(n) = nested else { return false };
                    if let PathStep::Attribute(name) = step {
                        match n.attributes.get(name) {
                            Some(a) if a.sensitive => return true,
                            Some(a) => nested = a.nested.as_ref(),
                            None => return false,
                        }
                    }
                }
                return false;
            }
            match block.blocks.get(name) {
                Some(b) => block = &b.block,
                None => return false,
            }
        }
        false
    }
}

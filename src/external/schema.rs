//! `Id`'s schema in API documents: its default serde form, a string of decimal digits
//! (JavaScript reads JSON numbers as doubles, exact only up to 2^53). `utoipa::ToSchema`
//! (feature `utoipa`) for OpenAPI, `schemars::JsonSchema` (feature `schemars`) for JSON
//! Schema; both describe the same string.

/// The name both schemas go by.
const NAME: &str = "Id";
/// Every `u64` in decimal: 1 to 20 digits.
const PATTERN: &str = "^[0-9]{1,20}$";
const DESCRIPTION: &str = "A Snowflake ID: an unsigned 64-bit integer as a string of decimal digits.";
/// An ID in the Twitter layout.
const EXAMPLE: &str = "1541815603606036480";

#[cfg(feature = "utoipa")]
mod openapi {
    use super::{DESCRIPTION, EXAMPLE, NAME, PATTERN};
    use crate::Id;
    use std::borrow::Cow;
    use utoipa::openapi::RefOr;
    use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};

    impl utoipa::PartialSchema for Id {
        fn schema() -> RefOr<Schema> {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(PATTERN))
                .min_length(Some(1))
                .max_length(Some(20))
                .description(Some(DESCRIPTION))
                .examples([EXAMPLE])
                .into()
        }
    }

    impl utoipa::ToSchema for Id {
        fn name() -> Cow<'static, str> {
            Cow::Borrowed(NAME)
        }
    }
}

#[cfg(feature = "schemars")]
mod json_schema {
    use super::{DESCRIPTION, EXAMPLE, NAME, PATTERN};
    use crate::Id;
    use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
    use std::borrow::Cow;

    impl JsonSchema for Id {
        fn schema_name() -> Cow<'static, str> {
            Cow::Borrowed(NAME)
        }

        fn schema_id() -> Cow<'static, str> {
            Cow::Borrowed("atomflake::Id")
        }

        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            json_schema!({
                "type": "string",
                "pattern": PATTERN,
                "minLength": 1,
                "maxLength": 20,
                "description": DESCRIPTION,
                "examples": [EXAMPLE],
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{EXAMPLE, PATTERN};
    use crate::Id;
    use serde_json::{Value, json};

    /// What both schemas say: `Id`'s string form.
    fn expected() -> Value {
        json!({
            "type": "string",
            "pattern": "^[0-9]{1,20}$",
            "minLength": 1,
            "maxLength": 20,
            "description": "A Snowflake ID: an unsigned 64-bit integer as a string of decimal digits.",
            "examples": ["1541815603606036480"],
        })
    }

    #[test]
    fn the_example_and_every_u64_fit_the_pattern() {
        assert_eq!(EXAMPLE.parse::<Id>(), Ok(Id::new(1_541_815_603_606_036_480)));
        assert_eq!(PATTERN, "^[0-9]{1,20}$");
        for id in [0, 9, 10, u64::MAX] {
            let text = Id::new(id).to_string();
            assert!((1..=20).contains(&text.len()), "{text}");
            assert!(text.bytes().all(|byte| byte.is_ascii_digit()), "{text}");
        }
    }

    #[cfg(feature = "utoipa")]
    #[test]
    fn utoipa_describes_an_id_as_a_string_of_digits() {
        use utoipa::{PartialSchema, ToSchema};
        assert_eq!(serde_json::to_value(Id::schema()).unwrap(), expected());
        assert_eq!(Id::name(), "Id");
    }

    #[cfg(feature = "schemars")]
    #[test]
    fn schemars_describes_an_id_as_a_string_of_digits() {
        use schemars::JsonSchema;
        let mut generator = schemars::SchemaGenerator::default();
        assert_eq!(
            serde_json::to_value(Id::json_schema(&mut generator)).unwrap(),
            expected()
        );
        assert_eq!(Id::schema_name(), "Id");
        // Used in a struct, `Id` is one shared definition.
        let reference = generator.subschema_for::<Id>();
        assert_eq!(
            serde_json::to_value(reference).unwrap(),
            json!({"$ref": "#/$defs/Id"})
        );
    }
}

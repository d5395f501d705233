//! End-to-end tests: the real server on 127.0.0.1:0, real HTTP clients.
//! One binary, a module per feature.

mod component_checks;
mod component_examples;
mod components;
mod components_p3;
mod config_ui;
mod examples;
mod hostile_clients;
mod hostile_files;
mod hostile_servlets;
mod http;
mod outbound;
mod parking;
mod reload;
mod request_id;
mod sendfile;
mod servlets;
mod sources;
mod static_files;
mod stores;
mod vhosts;

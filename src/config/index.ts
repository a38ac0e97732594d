export {
  loadConfig,
  type Config,
  type DatabaseConnection,
  type ServiceBusConnection,
  type LoadOptions,
} from "./load.ts";
export { settings, type SettingName } from "./schema.ts";

/**
 * A reply on a request/response link: Service Bus's status code, optional error condition, and body. Apart from
 * management.ts so that session-link.ts, which management.ts calls, can build one without importing it back.
 */
export interface ManagementResponse {
  status: number;
  condition?: string;
  description?: string;
  body?: Record<string, unknown>;
}
